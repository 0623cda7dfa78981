"""A weight-decay coefficient that follows its own ``step -> value`` schedule (Fujitsu's ``best_wd_coeff``)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import lightning as L


class WeightDecaySchedule(L.Callback):
    """Before every optimizer step: ``group["wd_coefficient"] = schedule(global_step)`` on every param group.

    LARS form ``"fujitsu"`` multiplies each group's ``weight_decay`` by this coefficient in the update (the
    FJSGD kernel's ``wds * best_wd_coeff``) and keeps the plain ``weight_decay`` in the trust ratio. The
    schedule is pure (`lightning_lars.schedules.source.FujitsuWeightDecay`), so a resumed run needs no state.

    Args:
        schedule: ``step -> coefficient``; or, as a recipe writes it (``_partial_: true`` on a schedule class,
            its fields bound), the class's constructor, called here with nothing left to bind.
    """

    def __init__(self, schedule: Callable[[int], float] | functools.partial):
        constructor = isinstance(schedule, functools.partial) and isinstance(schedule.func, type)
        self.schedule = schedule() if constructor else schedule

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        coefficient = float(self.schedule(trainer.global_step))
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["wd_coefficient"] = coefficient
        pl_module.log("train/wd_coefficient", coefficient, on_step=True, on_epoch=False, rank_zero_only=True)

    def planned_values(self, step: int, values: dict, plan) -> None:
        """For the recipe card and golden tests: the decay actually applied at ``step`` (weight_decay x coefficient)."""
        values["weight_decay"] = values["weight_decay"] * float(self.schedule(step))
