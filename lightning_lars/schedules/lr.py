"""The textbook LR schedules as frozen ``step -> lr`` objects (nanoGPT's ``get_lr``, optax's schedules).

Phase boundaries are fields in optimizer steps (see `lightning_lars.schedules.phases`). A recipe writes its
lengths in epochs (or in steps where its source counts steps); each class's ``from_epochs``-style classmethod
is the ``_target_`` of a ``conf/scheduler`` node, bound with ``_partial_: true`` and called by
`lightning_lars.schedules.build.build_lr_schedule` with the run's `EpochClock` and the scaled peak LR.
`lightning_lars.callbacks.techniques.schedule.ScheduleCallback` only applies the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lightning_lars.core.errors import UserError
from lightning_lars.schedules.phases import EpochClock, LRSchedule, linear_warmup


@dataclass(frozen=True, kw_only=True)
class WarmupPoly(LRSchedule):
    """Linear warmup from ``start_lr``, then ``end + (peak - end) * (1 - t)^power`` with ``t`` going from 0 at
    ``warmup_steps`` to 1 at ``total_steps``, and ``end_lr`` after it.

    The LARS schedule (You et al. 2017; MLPerf: power 2, end 1e-4; Fujitsu: power 2.2); power 1 is LAMB's
    linear decay.
    """

    warmup_steps: int
    total_steps: int
    start_lr: float = 0.0
    end_lr: float = 0.0
    power: float = 2.0

    def __post_init__(self):
        if not 0 <= self.warmup_steps < self.total_steps:
            raise UserError(
                f"the LR schedule needs 0 <= warmup steps ({self.warmup_steps}) < total steps"
                f" ({self.total_steps}); shorten scheduler.warmup_* or lengthen the run"
            )

    @property
    def decay_end_step(self) -> int:
        return self.total_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return linear_warmup(step, self.warmup_steps, self.start_lr, self.peak_lr)
        progress = min(1.0, (step - self.warmup_steps) / (self.total_steps - self.warmup_steps))
        return self.end_lr + (self.peak_lr - self.end_lr) * (1.0 - progress) ** self.power

    @classmethod
    def from_epochs(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        warmup_epochs: float = 5.0,  # Goyal et al. 2017's gradual warmup, the config's
        start_lr: float = 0.0,
        end_lr: float = 0.0,
        power: float = 2.0,
    ) -> WarmupPoly:
        """Warmup over ``warmup_epochs``, decay until the run's end (``conf/scheduler/warmup_poly.yaml``)."""
        warmup = clock.steps(warmup_epochs)
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_steps=warmup,
            total_steps=clock.run_steps(warmup),
            start_lr=start_lr,
            end_lr=end_lr,
            power=power,
        )

    @classmethod
    def from_steps(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        warmup_steps: int,
        total_steps: int,
        start_lr: float = 0.0,
        end_lr: float = 1e-4,  # MLPerf's fixed end LR, the config's
        power: float = 2.0,
    ) -> WarmupPoly:
        """Lengths in optimizer steps, for sources that publish steps (``warmup_poly_steps.yaml``): the MLPerf
        TPU logs and the LAMB code count ``ceil(epochs * images / batch)`` steps, which our drop-last epochs
        (``images // batch`` steps) cannot express."""
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_steps=int(warmup_steps),
            total_steps=int(total_steps),
            start_lr=start_lr,
            end_lr=end_lr,
            power=power,
        )

    @classmethod
    def linear(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        warmup_epochs: float = 5.0,  # Goyal et al. 2017's gradual warmup, the config's
        start_lr: float = 0.0,
        end_lr: float = 0.0,
        warmup_steps: int | None = None,
        total_steps: int | None = None,
    ) -> WarmupPoly:
        """Linear warmup, then linear decay to ``end_lr`` at the last step (LAMB's ResNet-50 schedule,
        ``warmup_linear.yaml``); lengths in epochs, or in steps where the source gives steps."""
        warmup = int(warmup_steps) if warmup_steps is not None else clock.steps(warmup_epochs)
        total = max(int(total_steps), warmup + 1) if total_steps is not None else clock.run_steps(warmup)
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_steps=warmup,
            total_steps=total,
            start_lr=start_lr,
            end_lr=end_lr,
            power=1.0,
        )


@dataclass(frozen=True, kw_only=True)
class CaffePoly(LRSchedule):
    """Intel Caffe's ``poly`` policy with its warmup: the decay is counted from step 0, not from the warmup's end.

    ``start + (peak - start) * t / Tw`` while ``t < Tw`` (``SGDSolver::GetWarmUpLR``), then
    ``peak * (1 - t / T)^power`` (``SGDSolver::GetLearningRate``, ``lr_policy: "poly"``; the LARS paper's
    Algorithm 1 writes ``gamma_t = gamma_0 (1 - t/T)^2``), reaching 0 at ``T``. The LR therefore drops at
    ``Tw`` from ``peak`` to ``peak * (1 - Tw/T)^power``, unlike `WarmupPoly`, whose decay starts at ``Tw``.
    """

    warmup_steps: int
    total_steps: int
    start_lr: float = 0.0
    power: float = 2.0

    @property
    def decay_end_step(self) -> int:
        return self.total_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return linear_warmup(step, self.warmup_steps, self.start_lr, self.peak_lr)
        return self.peak_lr * max(0.0, 1.0 - step / self.total_steps) ** self.power

    @classmethod
    def from_epochs(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        warmup_epochs: float = 5.0,  # Goyal et al. 2017's gradual warmup, the config's
        start_lr: float = 0.0,
        power: float = 2.0,
    ) -> CaffePoly:
        """``conf/scheduler/warmup_caffe_poly.yaml``: warmup over ``warmup_epochs``, ``T`` the run's end."""
        warmup = clock.steps(warmup_epochs)
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_steps=warmup,
            total_steps=clock.run_steps(warmup),
            start_lr=start_lr,
            power=power,
        )


@dataclass(frozen=True, kw_only=True)
class WarmupStep(LRSchedule):
    """Gradual warmup, then ``peak * gamma^k`` after the k-th milestone step (Goyal et al.: /10 at epochs 30,
    60 and 80). ``total_steps`` is the run's end: the schedule's last phase lasts until it."""

    warmup_steps: int
    total_steps: int
    milestones: tuple[int, ...]
    start_lr: float = 0.0
    gamma: float = 0.1

    @property
    def decay_end_step(self) -> int:
        return self.total_steps

    @property
    def drop_steps(self) -> tuple[int, ...]:
        return self.milestones

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return linear_warmup(step, self.warmup_steps, self.start_lr, self.peak_lr)
        passed = sum(step >= milestone for milestone in self.milestones)
        return self.peak_lr * self.gamma**passed

    @classmethod
    def from_epochs(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        warmup_epochs: float = 5.0,  # Goyal et al. 2017's gradual warmup, the config's
        start_lr: float = 0.0,
        milestones: Sequence[float] = (30, 60, 80),
        gamma: float = 0.1,
    ) -> WarmupStep:
        """``conf/scheduler/warmup_step.yaml``: warmup and milestones in epochs."""
        warmup = clock.steps(warmup_epochs)
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_steps=warmup,
            total_steps=clock.run_steps(warmup),
            milestones=tuple(clock.steps(m) for m in milestones),
            start_lr=start_lr,
            gamma=gamma,
        )


@dataclass(frozen=True, kw_only=True)
class Piecewise(LRSchedule):
    """``peak_lr * multipliers[i]`` between boundary steps i-1 and i, after an optional linear warmup to
    ``peak_lr * multipliers[0]``.

    ``multipliers`` has one more entry than ``boundaries``. PFN's "slow-start" schedule (Akiba et al. 2017)
    starts below the linear-scaling LR and steps down: boundaries at epochs 40, 70, 85, multipliers
    0.5, 0.075, 0.01, 0.001 of 0.1 x B/256.
    """

    warmup_steps: int
    total_steps: int
    boundaries: tuple[int, ...]
    multipliers: tuple[float, ...]
    start_lr: float = 0.0

    def __post_init__(self):
        if len(self.multipliers) != len(self.boundaries) + 1:
            raise UserError(
                f"scheduler.multipliers needs one entry more than scheduler.boundaries, got"
                f" {list(self.multipliers)} and {list(self.boundaries)}"
            )

    @property
    def decay_end_step(self) -> int:
        return self.total_steps

    @property
    def drop_steps(self) -> tuple[int, ...]:
        return self.boundaries

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return linear_warmup(step, self.warmup_steps, self.start_lr, self.peak_lr * self.multipliers[0])
        passed = sum(step >= boundary for boundary in self.boundaries)
        return self.peak_lr * self.multipliers[passed]

    @classmethod
    def from_epochs(
        cls,
        clock: EpochClock,
        peak_lr: float,
        *,
        boundaries: Sequence[float],
        multipliers: Sequence[float],
        warmup_epochs: float = 0.0,
        start_lr: float = 0.0,
    ) -> Piecewise:
        """``conf/scheduler/piecewise.yaml``: boundaries and warmup in epochs."""
        warmup = clock.steps(warmup_epochs)
        return cls(
            peak_lr=peak_lr,
            steps_per_epoch=clock.steps_per_epoch,
            warmup_steps=warmup,
            total_steps=clock.run_steps(warmup),
            boundaries=tuple(clock.steps(b) for b in boundaries),
            multipliers=tuple(multipliers),
            start_lr=start_lr,
        )
