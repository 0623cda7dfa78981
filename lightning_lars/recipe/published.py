"""How a recipe's ``published:`` block says its number is judged: which statistic of a run the number is,
why a recipe has no number, and how its source counted epochs. `card` prints them, `lightning_lars.check`
computes them from each run's ``results.json``.

    published:
      statistic: median_last_5_epochs   # one of STATISTICS; absent: final
      no_target: "why there is no number"  # only where top1 is not a number
      epoch_count: {divide: float, loop_steps: 79}  # the source's epoch numbering of its evaluations
"""

from __future__ import annotations

import math
import statistics

from lightning_lars.core.errors import UserError

# the per-run value a published top-1 is; `make check` averages it over seeds
STATISTICS = {
    "final": "the top-1 of the run's last evaluation",
    "first_at_target": "the top-1 of the run's first evaluation at or above the target (MLPerf), else its last",
    "median_last_5_epochs": "the median top-1 of the run's last 5 epoch evaluations",
}
MEDIAN_EPOCHS = 5


def statistic_of(published) -> str:
    name = (published or {}).get("statistic", "final")
    if name not in STATISTICS:
        raise UserError(f"published.statistic={name} is unknown; use one of {', '.join(STATISTICS)}")
    return name


def no_target_reason(published) -> str | None:
    """The recipe's reason for having no number to test against, or None when it has one."""
    return (published or {}).get("no_target")


def evaluations(record: dict) -> list[dict]:
    """The run's evaluations during training (``results.json`` ``evals``), one per step, in step order."""
    by_step = {int(e["step"]): e for e in record.get("evals") or []}
    return [by_step[step] for step in sorted(by_step)]


def run_value(record: dict, statistic: str, target: float) -> tuple[float, str]:
    """(top-1 in percent, how it was taken) for one run under ``statistic``."""
    final = 100 * record["metrics"]["val/top1"]
    evals = evaluations(record)
    if statistic == "first_at_target":
        reached = [e for e in evals if e["top1"] >= target]
        return (reached[0]["top1"], f"step {reached[0]['step']}") if reached else (final, "last eval")
    if statistic == "median_last_5_epochs":
        last = [e["top1"] for e in evals[-MEDIAN_EPOCHS:]] or [final]
        note = f"median of last {len(last)}" + ("" if len(last) == MEDIAN_EPOCHS else " (fewer evals)")
        return statistics.median(last), note
    return final, "last eval"


def source_epoch(step: int, count, num_images: int, global_batch: int) -> float | None:
    """The epoch number the source's log gives an evaluation after ``step`` updates, or None when the recipe
    does not say how its source counted. ``divide: float`` takes N / B as a float (TF's resnet_main.py),
    ``int`` takes N // B; ``loop_steps``: the log numbers the epoch at the loop's start, plus the loop's
    length in epochs, each floored."""
    if not count:
        return None
    per_epoch = num_images / global_batch if count.get("divide") == "float" else num_images // global_batch
    loop = int(count.get("loop_steps") or 0)
    return float(math.floor((step - loop) / per_epoch) + math.floor(loop / per_epoch))


def source_epoch_count(published) -> dict | None:
    count = (published or {}).get("epoch_count")
    if count is not None and count.get("divide") not in ("float", "int"):
        raise UserError(f"published.epoch_count.divide={count.get('divide')} is unknown; use float or int")
    return count
