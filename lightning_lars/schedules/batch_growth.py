"""Sony's batch-size control (Mikami et al. 2018) as schedules: where a step stands when the batch grows, and
the LR schedule read at that position.

The global batch is multiplied by ``factor`` from a given epoch on; an epoch at factor ``f`` has
``steps_per_epoch // f`` optimizer steps (`lightning_lars.callbacks.techniques.batch_size_control` trims it
to that). A schedule written in epochs at the recipe's batch is read at the same epoch.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from lightning_lars.schedules.phases import LRSchedule

# default of ``scale_lr``: the LR grows with the batch (linear scaling) while it is grown
GROWTH_SCALES_LR = True


@dataclass(frozen=True)
class BatchGrowth:
    """``factors``: (epoch, factor) pairs, epochs 0-based and increasing: the batch is the recipe's times
    ``factor`` from that epoch on (e.g. ``((5, 2),)``: the recipe's batch for epochs 0-4, twice it after)."""

    steps_per_epoch: int  # optimizer steps in an epoch at the recipe's batch
    factors: tuple[tuple[int, int], ...]

    @classmethod
    def from_table(cls, steps_per_epoch: int, growth: Mapping[int, int]) -> BatchGrowth:
        """From a recipe's ``growth`` table, epoch -> factor (``callbacks.batch_size_control.growth``)."""
        factors = {int(epoch): int(factor) for epoch, factor in dict(growth).items()}
        if not factors or any(epoch < 0 or factor < 1 for epoch, factor in factors.items()):
            raise ValueError(f"batch growth needs epochs >= 0 and integer factors >= 1, got {dict(growth)}")
        return cls(steps_per_epoch, tuple(sorted(factors.items())))

    def factor_at_epoch(self, epoch: int) -> int:
        """The batch factor in force during ``epoch`` (0-based): that of the latest epoch <= ``epoch``."""
        started = [factor for start, factor in self.factors if start <= epoch]
        return started[-1] if started else 1

    def steps_in_epoch(self, epoch: int) -> int:
        """Optimizer steps of ``epoch``: whole steps of the grown batch, the rest of the epoch trimmed."""
        return self.steps_per_epoch // self.factor_at_epoch(epoch)

    def at(self, step: int) -> tuple[int, int]:
        """``(base_step, factor)`` at optimizer step ``step``: the position in steps of the recipe's batch
        (the same epoch and the same images into it), and the batch factor in force."""
        last = self.factors[-1][0] if self.factors else 0
        epoch_start = 0  # first optimizer step of `epoch`
        for epoch in range(last + 1):
            factor = self.factor_at_epoch(epoch)
            steps_here = self.steps_per_epoch // factor
            if epoch == last:  # the factor stays from here on: whole epochs of `steps_here` steps
                done, within = divmod(step - epoch_start, steps_here)
                return (epoch + done) * self.steps_per_epoch + within * factor, factor
            if step < epoch_start + steps_here:
                return epoch * self.steps_per_epoch + (step - epoch_start) * factor, factor
            epoch_start += steps_here
        raise AssertionError("unreachable: the last epoch of the growth table returns")

    def step_reaching(self, base_step: int) -> int:
        """The first optimizer step whose position is ``base_step`` or later (a grown step is never past its
        position, so the search stops at ``base_step``)."""
        return bisect.bisect_left(range(base_step + 1), base_step, key=lambda step: self.at(step)[0])


@dataclass(frozen=True, kw_only=True)
class GrownBatchSchedule:
    """``step -> lr`` for a run whose batch grows: ``base`` read at the same position (`BatchGrowth.at`),
    times the batch factor when ``scale_lr`` (linear scaling, Goyal et al. sec. 2.1).

    Exposes the base schedule's ``peak_lr`` and ``steps_per_epoch``, and its phases in this run's steps."""

    base: LRSchedule
    growth: BatchGrowth
    scale_lr: bool

    @property
    def peak_lr(self) -> float:
        return self.base.peak_lr

    @property
    def steps_per_epoch(self) -> int:
        return self.base.steps_per_epoch

    @property
    def warmup_steps(self) -> int:
        return self.growth.step_reaching(self.base.warmup_steps)

    @property
    def decay_end_step(self) -> int:
        return self.growth.step_reaching(self.base.decay_end_step)

    @property
    def drop_steps(self) -> tuple[int, ...]:
        return tuple(self.growth.step_reaching(step) for step in self.base.drop_steps)

    def __call__(self, step: int) -> float:
        base_step, factor = self.growth.at(step)
        return self.base(base_step) * (factor if self.scale_lr else 1)
