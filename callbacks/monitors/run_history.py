"""Per-epoch numbers for the run's report.png: train and val loss, val top-1, training images/s."""

from __future__ import annotations

import math
import time

import lightning as L
from lightning_lars.callbacks import find_callback
from lightning_lars.callbacks.monitors.hparam_monitor import epoch_of
from lightning_lars.callbacks.monitors.throughput import ThroughputCallback


def _scalar(metrics, key: str) -> float | None:
    value = metrics.get(key)
    value = float(value) if value is not None else None
    return value if value is not None and math.isfinite(value) else None


class RunHistory(L.Callback):
    """Keeps ``epochs``: one dict per finished training epoch and per evaluation, for the run report.

    Training epochs give ``train_loss`` (the epoch mean Lightning logged) and ``images_per_sec`` (all devices,
    training batches only: data wait counts, validation does not). With a `ThroughputCallback` on the trainer,
    images/s is that callback's count over the epoch, so the plot and the results table agree (both leave out
    the warm-up batches); without one, the epoch's own clock; evaluations give ``val_loss`` and
    ``val_top1`` (percent) at their fractional epoch. Saved in checkpoints, so a resumed run plots its whole
    history.
    """

    def __init__(self):
        self.epochs: list[dict[str, float]] = []
        self._epoch_start: float | None = None
        self._images = 0
        self._val_seconds = 0.0  # evaluations inside this training epoch (s): not training time
        self._val_start: float | None = None
        self._counted_at_start: tuple[int, float] | None = None  # the ThroughputCallback's (images, s) then

    def on_train_epoch_start(self, trainer, pl_module):
        self._epoch_start, self._images, self._val_seconds = time.perf_counter(), 0, 0.0
        throughput = find_callback(trainer, ThroughputCallback)
        self._counted_at_start = (throughput.images, throughput.busy_s) if throughput else None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        images = batch[0] if isinstance(batch, (list, tuple)) else batch
        self._images += int(images.shape[0])

    def on_train_epoch_end(self, trainer, pl_module):
        row = {"epoch": epoch_of(trainer)}  # fractional: a run stopped by max_steps ends inside an epoch
        loss = _scalar(trainer.callback_metrics, "train/loss_epoch")
        if loss is not None:
            row["train_loss"] = loss
        throughput = find_callback(trainer, ThroughputCallback)
        if throughput is not None and self._counted_at_start is not None:
            images, busy_s = (
                now - then
                for now, then in zip((throughput.images, throughput.busy_s), self._counted_at_start)
            )
            if images and busy_s > 0:  # an epoch of warm-up batches only has no rate
                row["images_per_sec"] = images * trainer.world_size / busy_s
        elif self._epoch_start is not None and self._images:
            train_seconds = time.perf_counter() - self._epoch_start - self._val_seconds
            row["images_per_sec"] = self._images * trainer.world_size / max(train_seconds, 1e-9)
        self.epochs.append(row)

    def on_validation_start(self, trainer, pl_module):
        self._val_start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        if self._val_start is not None:
            self._val_seconds += time.perf_counter() - self._val_start
            self._val_start = None
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        row = {"epoch": epoch_of(trainer)}
        for key, name, scale in (("val/loss", "val_loss", 1.0), ("val/top1", "val_top1", 100.0)):
            value = _scalar(trainer.callback_metrics, key)
            if value is not None:
                row[name] = scale * value
        if len(row) > 1:
            self.epochs.append(row)

    def state_dict(self):
        return {"epochs": [dict(row) for row in self.epochs]}

    def load_state_dict(self, state_dict):
        self.epochs = [dict(row) for row in state_dict.get("epochs", [])]
