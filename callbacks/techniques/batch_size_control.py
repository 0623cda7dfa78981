"""Sony's batch-size control (Mikami et al. 2018): the global batch grows after the first epochs."""

from __future__ import annotations

from collections.abc import Mapping

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from lightning_lars.core.errors import UserError
from lightning_lars.schedules.batch_growth import GROWTH_SCALES_LR, BatchGrowth, GrownBatchSchedule


class BatchSizeControl(L.Callback):
    """Multiplies the global batch by ``growth[epoch]`` from that epoch on, exactly.

    The per-device batch stays; gradient accumulation grows by the factor (Lightning reads
    ``trainer.accumulate_grad_batches`` at every batch), and each epoch is trimmed to whole optimizer steps
    of the grown batch (``steps_per_epoch // factor`` of them), so no step sees a partial batch. The recipe's
    plan (`lightning_lars.recipe.plan`) reads ``growth`` and ``scale_lr`` from this callback's config node,
    ``callbacks.batch_size_control``, without building it.

    Args:
        growth: epoch (0-based) -> factor over the recipe's ``batch.global_size``; e.g. ``{5: 2}``.
        scale_lr: multiply the LR by the factor (linear scaling) while the batch is grown.
    """

    def __init__(self, growth: Mapping[int, int], scale_lr: bool = GROWTH_SCALES_LR):
        self.growth = {int(e): int(f) for e, f in dict(growth).items()}
        if not self.growth or min(self.growth.values()) < 1 or min(self.growth) < 0:
            raise UserError(
                f"callbacks.batch_size_control.growth needs epoch: factor >= 1 pairs, got {dict(growth)}"
            )
        self.scale_lr = scale_lr
        self.base_accumulation: int | None = None
        self.batch_growth: BatchGrowth | None = None  # built at setup, on the LR schedule's epoch clock
        self._loader_batches: int | None = None  # micro-batches per epoch the loader gives
        self._trimmed_to: int | None = None  # what we set fit_loop.max_batches to

    def setup(self, trainer, pl_module, stage):
        if stage != "fit":
            return
        self.base_accumulation = trainer.accumulate_grad_batches
        if isinstance(pl_module.lr_schedule, GrownBatchSchedule):  # a run's module: the plan grew it, once
            self.batch_growth = pl_module.lr_schedule.growth
            return
        # a module built without a plan (a test, a script): grow its schedule here
        steps_per_epoch = pl_module.lr_schedule.steps_per_epoch
        too_big = {e: f for e, f in self.growth.items() if steps_per_epoch // f == 0}
        if too_big:
            raise UserError(
                f"batch growth {too_big} leaves no full step in an epoch of {steps_per_epoch} steps;"
                " lower the factor or batch.global_size"
            )
        self.batch_growth = BatchGrowth.from_table(steps_per_epoch, self.growth)
        pl_module.lr_schedule = GrownBatchSchedule(
            base=pl_module.lr_schedule, growth=self.batch_growth, scale_lr=self.scale_lr
        )

    def on_train_epoch_start(self, trainer, pl_module):
        epoch = trainer.current_epoch
        factor = self.batch_growth.factor_at_epoch(epoch)
        trainer.accumulate_grad_batches = self.base_accumulation * factor
        micro_batches = self.batch_growth.steps_in_epoch(epoch) * trainer.accumulate_grad_batches
        if self._trimmed_to is None or trainer.fit_loop.max_batches != self._trimmed_to:
            self._loader_batches = trainer.fit_loop.max_batches  # fresh from the loader, not our trim
        available = self._loader_batches
        if available < micro_batches:
            raise UserError(
                f"the train loader gives {available} batches per epoch, batch-size control needs"
                f" {micro_batches}; remove trainer.limit_train_batches"
            )
        # Trim the epoch to whole grown steps: Lightning steps on an epoch's last batch even when the
        # accumulation is incomplete, which would make that step's batch smaller than the recipe's.
        if trainer.val_check_batch in (available, self._trimmed_to):  # "validate at the end of the epoch"
            trainer.val_check_batch = micro_batches
        trainer.fit_loop.max_batches = self._trimmed_to = micro_batches
        rank_zero_info(
            f"[lightning-lars] epoch {trainer.current_epoch}: global batch x{factor}"
            f" ({trainer.accumulate_grad_batches} accumulation steps,"
            f" {self.batch_growth.steps_in_epoch(epoch)} steps)"
        )
