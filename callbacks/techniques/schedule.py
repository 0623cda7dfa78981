"""Applies the module's ``step -> lr`` schedule before every optimizer step."""

from __future__ import annotations

import lightning as L


class ScheduleCallback(L.Callback):
    """Sets ``group["lr"] = schedule(global_step)`` on every param group and logs it as ``train/lr`` at the
    trainer's logging interval.

    The schedule is a frozen ``step -> lr`` object (`lightning_lars.schedules.lr`), so resuming from a
    checkpoint needs no scheduler state: ``global_step`` alone gives the LR. ``global_step`` counts optimizer
    steps, so with gradient accumulation every micro-batch of one step sees the same LR.
    """

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        lr = pl_module.lr_schedule(trainer.global_step)
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr
        # Logged only where Lightning writes step metrics: self.log turns a float into a device tensor, a
        # blocking host-to-device copy (the host waits for the GPU) if done at every batch.
        if trainer.log_every_n_steps and (trainer.global_step + 1) % trainer.log_every_n_steps == 0:
            pl_module.log("train/lr", lr, on_step=True, on_epoch=False, rank_zero_only=True)
