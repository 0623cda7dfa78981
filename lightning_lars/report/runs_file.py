"""The runs files' lines: ``bench_row`` builds one training run's line as ``benchmarks/bench_largebatch.py``
writes it, ``append_run`` adds it whole, ``read_runs`` reads a file back (one line naming a bad line), and
``final_top1`` is a run's last top-1. Every report of runs (runs_table, fair_report, factor_study) reads through
here. Imports only ``core`` and ``report.bench_key``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from lightning_lars.core.errors import UserError
from lightning_lars.report.bench_key import BENCH_KIND


def bench_row(
    *,
    arm,
    recipe,
    overrides,
    dataset,
    ratio,
    batch,
    epochs,
    resolution,
    seed,
    top1,
    wall_s,
    machine,
    commit,
    factors=None,
) -> dict:
    """One training run as a runs.jsonl line; the keys ``recipes/README.md``'s table reads are filled too."""
    final = top1[-1] if top1 else math.nan
    return {
        "kind": BENCH_KIND,
        "arm": arm,
        "recipe": recipe,
        "overrides": list(overrides),
        "dataset": dataset,
        "ratio": ratio,
        "batch": batch,
        "epochs": epochs,
        "resolution": resolution,
        "seed": seed,
        "factors": dict(factors or {}),  # width, lr_rule, device, ...: the set-up beyond sizes
        "top1_per_epoch": [None if not math.isfinite(v) else round(v, 3) for v in top1],
        "wall_s": round(wall_s, 1),
        "machine": machine,
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit,
        "hardware": machine,
        "top-1 (mean +- std, n)": f"{final:.2f} %, n=1" if math.isfinite(final) else "diverged",
        "time": f"{wall_s:.0f} s wall",
        "log or W&B run": f"bench-largebatch {arm} ratio={ratio:g} seed={seed}",
    }


def read_runs(path: Path, required: bool = False) -> list[dict]:
    """The rows of a runs file; a missing file has none, unless ``required`` (a report of it): a `UserError`."""
    if not Path(path).is_file():
        if required:
            raise UserError(
                f"{path} not found: give --runs FILE, a runs file that make bench-largebatch or make check wrote"
            )
        return []
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise UserError(
                    f"{path} line {number} is not JSON ({err.msg}): fix or delete that line"
                ) from None
    return rows


def append_run(row: dict, path: Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with Path(path).open("a") as out:  # one line per finished run: an interrupted bench keeps the others
        out.write(json.dumps(row) + "\n")


def final_top1(row: dict) -> float:
    last = row["top1_per_epoch"][-1] if row["top1_per_epoch"] else None
    return math.nan if last is None else float(last)
