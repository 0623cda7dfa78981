"""Shared by the compile tests: a callback that reads torch's dynamo counters during a real training run.

``torch._dynamo.utils.counters`` is dynamo's own bookkeeping: ``graph_break`` counts each break by reason,
``stats["unique_graphs"]`` each graph compiled (a recompilation adds one), ``recompiles`` each guard failure
by reason. A compiled run pays for its graphs once, in warm-up; after it, every new graph is time lost.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
from torch._dynamo.utils import counters


def snapshot() -> dict[str, dict[str, int]]:
    return {
        "graph_break": dict(counters["graph_break"]),
        "unique_graphs": counters["stats"]["unique_graphs"],
        "recompiles": dict(counters["recompiles"]),
    }


class DynamoCounters(L.Callback):
    """Warm-up is the first training epoch and its validation: the train-mode graph compiles at the first
    step, the eval-mode graph at the first validation. Counters are then read and cleared; the next epochs
    (LR changing every step, train -> validation -> train) must compile nothing more. Writes
    ``<run dir>/dynamo_counters.json``: {"warm_up": ..., "after": ..., "optimizer_steps": N, "lrs": [...]}."""

    def __init__(self):
        self.warm_up: dict | None = None
        self.lrs: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])

    def on_validation_epoch_end(self, trainer, pl_module):
        if self.warm_up is None and not trainer.sanity_checking:
            self.warm_up = snapshot()
            counters.clear()

    def on_fit_end(self, trainer, pl_module):
        result = {
            "warm_up": self.warm_up,
            "after": snapshot(),
            "optimizer_steps": trainer.global_step,
            "lrs": self.lrs,
        }
        Path(trainer.default_root_dir, "dynamo_counters.json").write_text(json.dumps(result))


class LossHistory(L.Callback):
    """Appends ``[global_step, batch_idx, loss]`` per micro-batch to ``<run dir>/losses.jsonl``: a killed run
    and its resumed process write one file, to compare step by step with an unbroken run."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        line = json.dumps([trainer.global_step, batch_idx, float(outputs["loss"])])
        with open(Path(trainer.default_root_dir, "losses.jsonl"), "a") as log:
            log.write(line + "\n")


def losses(run_dir: Path) -> dict[tuple[int, int], float]:
    """The last loss written for each (step, micro-batch): a resumed run repeats none, but a killed one may
    have written a step past its last checkpoint that the resumed process then redoes."""
    rows = (json.loads(line) for line in Path(run_dir, "losses.jsonl").read_text().splitlines())
    return {(step, batch): loss for step, batch, loss in rows}
