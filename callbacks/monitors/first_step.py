"""The time from the command line to the first optimizer step, as one more plan line: what a user waits for
before training really runs (imports, config, data loaders starting, FFCV's JIT compile, the first step)."""

from __future__ import annotations

import time

import lightning as L
from lightning.pytorch.utilities import rank_zero_info


class FirstStepTime(L.Callback):
    """Prints ``plan: first optimizer step done X s after the command line`` once, on rank 0.

    Args:
        started: ``time.perf_counter()`` taken when the entry point started (``lightning_lars.train.STARTED``).
    """

    def __init__(self, started: float):
        self.started = started
        self.seconds: float | None = None  # s from the command line to the end of the first optimizer step
        self._first_global_step: int | None = None

    def on_train_start(self, trainer, pl_module):
        self._first_global_step = trainer.global_step  # a resumed run counts its own first step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.seconds is not None or trainer.global_step <= (self._first_global_step or 0):
            return  # still accumulating the first step's micro-batches
        self.seconds = time.perf_counter() - self.started
        rank_zero_info(
            f"[lightning-lars] plan: first optimizer step done {self.seconds:.1f} s after the command"
            " line (imports, config, loaders, JIT compile, one step)"
        )
