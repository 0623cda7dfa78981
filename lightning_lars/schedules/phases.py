"""What every LR schedule object shares: the epoch clock it was built on, its peak and its phases.

A schedule is a small frozen dataclass called as ``schedule(step) -> lr`` (``step``: optimizer updates done
before this one, 0-based; never micro-batches). Its phase boundaries are fields or properties in optimizer
steps, read the same way on every schedule by the recipe plan, the recipe card and the golden tests:

- ``warmup_steps``: updates that ramp the LR up (the first update after it is the first decayed one);
- ``decay_end_step``: where the LR reaches its end value (the run's last step for a step schedule; one past
  the run for TF's decay; before the run's end for Fujitsu's, which then stays flat);
- ``drop_steps``: the steps where a step or piecewise schedule drops (empty for smooth ones).

A recipe gives its lengths in epochs of its source's count; `EpochClock` converts them to steps, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpochClock:
    """The run as the recipe plan counts it: ``steps_per_epoch`` optimizer steps per epoch (the source's
    epoch, `lightning_lars.recipe.keys.epoch_length`) and ``total_epochs`` epochs (fractional when
    ``trainer.max_steps`` ends the run inside an epoch)."""

    steps_per_epoch: int
    total_epochs: float

    def steps(self, epochs: float) -> int:
        """``epochs`` of this clock in optimizer steps, rounded to the nearest step."""
        return round(epochs * self.steps_per_epoch)

    def run_steps(self, warmup_steps: int) -> int:
        """The run's length in steps, at least one step past ``warmup_steps``: a run shorter than its warmup
        (a toy run) still ends on a decayed step instead of dividing by a zero-length decay."""
        return max(self.steps(self.total_epochs), warmup_steps + 1)


@dataclass(frozen=True, kw_only=True)
class LRSchedule:
    """Base of the ``step -> lr`` schedules. ``peak_lr`` is already scaled to the global batch
    (`lightning_lars.schedules.scaling.scale_lr`); ``steps_per_epoch`` is the clock the recipe's epochs were
    converted with, kept for the callbacks that count epochs themselves (batch growth, the RMSprop blend).

    Each subclass defines ``warmup_steps`` and ``decay_end_step`` (fields or properties, in steps)."""

    peak_lr: float
    steps_per_epoch: int

    def __call__(self, step: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} does not define its LR")

    @property
    def drop_steps(self) -> tuple[int, ...]:
        """Steps where the LR drops in one go: none for a smooth schedule."""
        return ()


def linear_warmup(step: int, warmup_steps: int, start_lr: float, peak_lr: float) -> float:
    """Linear ramp from ``start_lr`` at step 0 to ``peak_lr`` at ``warmup_steps`` (Goyal et al. sec. 2.2)."""
    return start_lr + (peak_lr - start_lr) * step / warmup_steps
