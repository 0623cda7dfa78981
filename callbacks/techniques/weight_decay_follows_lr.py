"""Fujitsu's weight decay that is warmed up and decayed with the learning rate (MLPerf v0.6, MXNet)."""

from __future__ import annotations

import lightning as L


class WeightDecayFollowsLR(L.Callback):
    """Before every optimizer step: ``weight_decay = wd * lr(step) / peak_lr`` on every param group.

    ``wd`` is each group's decay as built (0 for the excluded BN/bias group stays 0), kept in the group as
    ``initial_weight_decay`` so a resumed run scales the same base. The LR comes from the module's pure
    schedule, so this needs no state of its own and does not depend on callback order.
    """

    @staticmethod
    def weight_decay_at(step: int, lr_schedule, base_weight_decay: float) -> float:
        """``base * lr(step) / peak_lr``: pure, for any schedule the plan built (each has its ``peak_lr``)."""
        return base_weight_decay * lr_schedule(step) / lr_schedule.peak_lr

    def planned_values(self, step: int, values: dict, plan) -> None:
        """For the recipe card (`lightning_lars.recipe.plan`): the decay this callback applies at ``step``."""
        values["weight_decay"] = self.weight_decay_at(step, plan.lr_schedule, values["weight_decay"])

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                base = group.setdefault("initial_weight_decay", group["weight_decay"])
                group["weight_decay"] = self.weight_decay_at(trainer.global_step, pl_module.lr_schedule, base)
