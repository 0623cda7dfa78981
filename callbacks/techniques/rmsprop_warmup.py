"""Sets the SGD/RMSprop blend of `lightning_lars.optim.rmsprop_warmup.RMSpropWarmup` before every step."""

from __future__ import annotations

import lightning as L

from lightning_lars.schedules.rmsprop_blend import SgdFractionElu


class RMSpropWarmupBlend(L.Callback):
    """``group["sgd_fraction"] = SgdFractionElu(...)(step)`` on every group (Akiba et al. 2017, sec. 3.1).

    Args:
        center_epochs: beta_center, the epoch at which SGD and RMSprop weigh half each (10).
        period_epochs: beta_period, the width of the transition in epochs (5).
    """

    def __init__(self, center_epochs: float = 10.0, period_epochs: float = 5.0):
        self.center_epochs = center_epochs
        self.period_epochs = period_epochs

    def blend(self, steps_per_epoch: int) -> SgdFractionElu:
        """The blend on a clock of ``steps_per_epoch`` steps (the LR schedule's: the recipe's epochs)."""
        return SgdFractionElu(
            steps_per_epoch=steps_per_epoch,
            center_epochs=self.center_epochs,
            period_epochs=self.period_epochs,
        )

    def planned_values(self, step: int, values: dict, plan) -> None:
        """For the recipe card (`lightning_lars.recipe.plan`): the SGD share of the blend at ``step``."""
        values["sgd_fraction"] = self.blend(plan.steps_per_epoch)(step)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        fraction = self.blend(pl_module.lr_schedule.steps_per_epoch)(trainer.global_step)
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["sgd_fraction"] = fraction
        pl_module.log("train/sgd_fraction", fraction, on_step=True, on_epoch=False, rank_zero_only=True)
