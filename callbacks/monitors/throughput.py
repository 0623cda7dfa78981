"""Images per second (overall and per device) and the fraction of training time spent waiting for data."""

from __future__ import annotations

import time

import lightning as L
import torch
from lightning_lars.callbacks import is_log_step


def ends_a_timed_span(trainer) -> bool:
    """At ``on_train_batch_end``: a log step, where Lightning reads the logged values back from the device anyway,
    or the run's last step (``max_steps``, or the last batch of the last epoch)."""
    last_step = 0 < trainer.max_steps <= trainer.global_step
    max_epochs = trainer.max_epochs if trainer.max_epochs not in (None, -1) else None
    last_batch = trainer.is_last_batch and max_epochs is not None and trainer.current_epoch + 1 >= max_epochs
    return is_log_step(trainer) or last_step or last_batch


def _batch_size(batch) -> int:
    images = batch[0] if isinstance(batch, (list, tuple)) else batch
    return int(images.shape[0])


class ThroughputCallback(L.Callback):
    """Times each training batch; logs ``perf/images_per_sec`` (all devices), ``perf/images_per_sec_per_device``
    and ``perf/data_wait_fraction`` at the trainer's log steps, and keeps whole-run totals.

    Data wait = time from the end of one training batch to the start of the next (the loader's share);
    compute = start to end of a batch. The first ``skip_batches`` batches (warm-up, compilation) are not counted.
    Validation time between epochs is excluded.

    On CUDA the host queues steps ahead of the GPU, so a batch's end on the host's clock can come before the GPU
    has run it. At the steps that end a timed span (``ends_a_timed_span``: the log steps, where Lightning waits
    for the GPU to read the logged values anyway, and the last step) the clock waits for the GPU first: the rate
    is the GPU's, with no wait added between log steps.
    """

    def __init__(self, skip_batches: int = 2):
        self.skip_batches = skip_batches
        self.images = 0  # per device, counted batches only
        self.compute_s = 0.0
        self.wait_s = 0.0
        self._seen = 0
        self._batch_start: float | None = None
        self._batch_end: float | None = None
        self._cuda: torch.device | None = None

    @property
    def busy_s(self) -> float:
        return self.compute_s + self.wait_s

    def images_per_sec(self, world_size: int = 1) -> float:
        """Training images per second: this device's rate times ``world_size`` (all devices), or NaN before
        any batch was counted. Assumes equal per-device batches, which the batch plan guarantees."""
        return self.images * world_size / self.busy_s if self.busy_s > 0 else float("nan")

    def data_wait_fraction(self) -> float:
        """Share of counted training time spent waiting for the loader (0 = compute bound, 1 = starved)."""
        return self.wait_s / self.busy_s if self.busy_s > 0 else float("nan")

    def summary(self, world_size: int = 1) -> dict[str, float]:
        """Whole-run totals (resumed runs included) for the results table and W&B summary."""
        return {
            "perf/images_per_sec": self.images_per_sec(world_size),
            "perf/images_per_sec_per_device": self.images_per_sec(1),
            "perf/data_wait_fraction": self.data_wait_fraction(),
            "perf/num_images_counted": float(self.images * world_size),
        }

    def on_train_start(self, trainer, pl_module):
        self._cuda = pl_module.device if pl_module.device.type == "cuda" else None

    def on_train_epoch_start(self, trainer, pl_module):
        self._batch_end = None  # do not count the gap across validation or epoch boundaries

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        now = time.perf_counter()
        if self._batch_end is not None and self._seen >= self.skip_batches:
            self.wait_s += now - self._batch_end
        self._batch_start = now

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        # from the last warm-up batch on: work it queued would otherwise be timed with the first counted batch
        if self._cuda is not None and self._seen + 1 >= self.skip_batches and ends_a_timed_span(trainer):
            torch.cuda.synchronize(self._cuda)
        now = time.perf_counter()
        self._seen += 1
        if self._seen > self.skip_batches and self._batch_start is not None:
            self.compute_s += now - self._batch_start
            self.images += _batch_size(batch)
        self._batch_end = now
        if is_log_step(trainer) and self.busy_s > 0:
            summary = self.summary(trainer.world_size)
            summary.pop("perf/num_images_counted")
            pl_module.log_dict(summary, on_step=True, on_epoch=False, rank_zero_only=True)

    def state_dict(self):
        return {"images": self.images, "compute_s": self.compute_s, "wait_s": self.wait_s}

    def load_state_dict(self, state_dict):
        self.images, self.compute_s, self.wait_s = (state_dict[k] for k in ("images", "compute_s", "wait_s"))
