"""Learning-rate schedules as pure ``step -> lr`` functions (nanoGPT's ``get_lr``, optax's schedules).

Every schedule takes the optimizer step (0-based, counted in optimizer steps, not micro-batches) and
keyword-only shape arguments, and returns the LR for that step. ``peak_lr`` is already scaled to the global
batch by `lightning_lars.schedules.scaling.scale_lr`; epochs are converted to steps with ``steps_per_epoch`` (images
per epoch // global batch, drop-last). Configs bind the shape with ``_partial_: true``;
`lightning_lars.callbacks.techniques.schedule.ScheduleCallback` only applies the value.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence


def _warmup(step: int, warmup_steps: int, start_lr: float, peak_lr: float) -> float:
    """Linear ramp from ``start_lr`` at step 0 to ``peak_lr`` at ``warmup_steps`` (Goyal et al. sec. 2.2)."""
    return start_lr + (peak_lr - start_lr) * step / warmup_steps


def warmup_poly(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    warmup_epochs: float = 0.0,
    start_lr: float = 0.0,
    end_lr: float = 0.0,
    power: float = 2.0,
) -> float:
    """Linear warmup, then polynomial decay ``end + (peak - end) * (1 - t)^power`` to the last step.

    The LARS schedule (You et al. 2017; MLPerf: power 2, end 1e-4; Fujitsu: power 2.2).
    """
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    total_steps = max(round(total_epochs * steps_per_epoch), warmup_steps + 1)
    return warmup_poly_steps(step, peak_lr=peak_lr, steps_per_epoch=steps_per_epoch, total_epochs=total_epochs,
                             warmup_steps=warmup_steps, total_steps=total_steps, start_lr=start_lr,
                             end_lr=end_lr, power=power)


def warmup_step(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    warmup_epochs: float = 0.0,
    start_lr: float = 0.0,
    milestones: Sequence[float] = (30, 60, 80),
    gamma: float = 0.1,
) -> float:
    """Gradual warmup, then multiply by ``gamma`` at each milestone epoch (Goyal et al.: /10 at 30, 60, 80).

    ``total_epochs`` is accepted for a uniform signature; a step schedule does not need it.
    """
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    if step < warmup_steps:
        return _warmup(step, warmup_steps, start_lr, peak_lr)
    passed = sum(step >= round(m * steps_per_epoch) for m in milestones)
    return peak_lr * gamma**passed


def _steps(epochs: float, steps_per_epoch: int, steps: int | None) -> int:
    """A schedule length in optimizer steps: ``steps`` when the source gives steps, else ``epochs`` converted."""
    return int(steps) if steps is not None else round(epochs * steps_per_epoch)


def warmup_poly_steps(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    warmup_steps: int,
    total_steps: int,
    start_lr: float = 0.0,
    end_lr: float = 0.0,
    power: float = 2.0,
) -> float:
    """`warmup_poly` with its lengths in optimizer steps, for sources that publish steps, not epochs.

    The MLPerf TPU logs and the LAMB code count ``ceil(epochs * images / batch)`` steps, which our drop-last
    epochs (``images // batch`` steps) cannot express. ``steps_per_epoch`` and ``total_epochs`` are accepted
    for the uniform signature and unused.
    """
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(f"need 0 <= warmup_steps ({warmup_steps}) < total_steps ({total_steps})")
    if step < warmup_steps:
        return _warmup(step, warmup_steps, start_lr, peak_lr)
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return end_lr + (peak_lr - end_lr) * (1.0 - progress) ** power


def warmup_linear(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    warmup_epochs: float = 0.0,
    start_lr: float = 0.0,
    end_lr: float = 0.0,
    warmup_steps: int | None = None,
    total_steps: int | None = None,
) -> float:
    """Linear warmup, then linear decay to ``end_lr`` at the last step (LAMB's ResNet-50 schedule).

    Lengths in epochs, or in steps where the source gives steps (``warmup_steps``, ``total_steps``).
    """
    warmup = _steps(warmup_epochs, steps_per_epoch, warmup_steps)
    total = max(_steps(total_epochs, steps_per_epoch, total_steps), warmup + 1)
    return warmup_poly_steps(step, peak_lr=peak_lr, steps_per_epoch=steps_per_epoch, total_epochs=total_epochs,
                             warmup_steps=warmup, total_steps=total, start_lr=start_lr, end_lr=end_lr, power=1.0)


def warmup_caffe_poly(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    warmup_epochs: float = 0.0,
    start_lr: float = 0.0,
    power: float = 2.0,
) -> float:
    """Intel Caffe's ``poly`` policy with its warmup: the decay is counted from step 0, not from the warmup's end.

    ``start + (peak - start) * t / Tw`` while ``t < Tw`` (``SGDSolver::GetWarmUpLR``), then
    ``peak * (1 - t / T)^power`` (``SGDSolver::GetLearningRate``, ``lr_policy: "poly"``; the LARS paper's
    Algorithm 1 writes ``gamma_t = gamma_0 (1 - t/T)^2``), reaching 0 at ``T``. The LR therefore drops at
    ``Tw`` from ``peak`` to ``peak * (1 - Tw/T)^power``, unlike `warmup_poly`, whose decay starts at ``Tw``.
    """
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    total_steps = max(round(total_epochs * steps_per_epoch), warmup_steps + 1)  # as warmup_poly (toy runs)
    if step < warmup_steps:
        return _warmup(step, warmup_steps, start_lr, peak_lr)
    return peak_lr * max(0.0, 1.0 - step / total_steps) ** power


def piecewise(
    step: int,
    *,
    peak_lr: float,
    steps_per_epoch: int,
    total_epochs: float,
    boundaries: Sequence[float],
    multipliers: Sequence[float],
    warmup_epochs: float = 0.0,
    start_lr: float = 0.0,
) -> float:
    """``peak_lr * multipliers[i]`` between boundary epochs i-1 and i, after an optional linear warmup.

    ``multipliers`` has one more entry than ``boundaries``. PFN's "slow-start" schedule (Akiba et al. 2017)
    starts below the linear-scaling LR and steps down: boundaries [40, 70, 85], multipliers
    [0.5, 0.075, 0.01, 0.001] of 0.1 x B/256.
    """
    if len(multipliers) != len(boundaries) + 1:
        raise ValueError(f"piecewise needs len(multipliers) == len(boundaries) + 1, got {multipliers}, {boundaries}")
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    if step < warmup_steps:
        return _warmup(step, warmup_steps, start_lr, peak_lr * multipliers[0])
    passed = sum(step >= round(b * steps_per_epoch) for b in boundaries)
    return peak_lr * multipliers[passed]


def sgd_fraction_elu(step: int, *, steps_per_epoch: int, center_epochs: float = 10.0,
                     period_epochs: float = 5.0) -> float:
    """Akiba et al. 2017's RMSprop warm-up blend: the weight of the SGD term, 1 minus that of RMSprop.

    An ELU-shaped ramp in epochs ``e`` (continuous with a continuous slope, both 1/period at the centre)::

        e <  c:           0.5 * exp(2 (e - c) / p)
        e <  c + p / 2:   0.5 + (e - c) / p
        otherwise:        1                        (pure momentum SGD)

    with ``c = center_epochs`` (beta_center, 10) and ``p = period_epochs`` (beta_period, 5).
    """
    epoch = step / steps_per_epoch
    if epoch < center_epochs:
        return 0.5 * math.exp(2.0 * (epoch - center_epochs) / period_epochs)
    if epoch < center_epochs + period_epochs / 2:
        return 0.5 + (epoch - center_epochs) / period_epochs
    return 1.0


def batch_growth(step: int, *, steps_per_epoch: int, growth: Mapping[int, int]) -> tuple[float, int]:
    """Sony's batch-size control (Mikami et al. 2018): where step ``step`` stands when the batch grows.

    ``growth`` maps an epoch to the factor the global batch is multiplied by from that epoch on (e.g.
    ``{5: 2}``: the recipe's batch for epochs 0-4, twice it afterwards). An epoch at factor ``f`` has
    ``steps_per_epoch // f`` optimizer steps (`lightning_lars.callbacks.techniques.batch_size_control` trims it to that).

    Returns ``(base_step, factor)``: the position in steps of the recipe's batch (so a schedule written in
    epochs at that batch reads the same epoch), and the batch factor in force at ``step``.
    """
    factors = _growth_factors(growth)
    last = max(factors, default=0)
    epoch_start = 0  # first optimizer step of `epoch`
    for epoch in range(last + 1):
        factor = factor_at_epoch(epoch, factors)
        steps_here = steps_per_epoch // factor
        if epoch == last:  # the factor stays from here on: whole epochs of `steps_here` steps
            done, within = divmod(step - epoch_start, steps_here)
            return (epoch + done) * steps_per_epoch + within * factor, factor
        if step < epoch_start + steps_here:
            return epoch * steps_per_epoch + (step - epoch_start) * factor, factor
        epoch_start += steps_here
    raise AssertionError("unreachable: the last epoch of the growth table returns")


def _growth_factors(growth: Mapping[int, int]) -> dict[int, int]:
    factors = {int(epoch): int(factor) for epoch, factor in dict(growth).items()}
    if any(epoch < 0 or factor < 1 for epoch, factor in factors.items()):
        raise ValueError(f"batch growth needs epochs >= 0 and integer factors >= 1, got {dict(growth)}")
    return factors


def factor_at_epoch(epoch: int, growth: Mapping[int, int]) -> int:
    """The batch factor in force during ``epoch`` (0-based): the entry of the latest epoch <= ``epoch``."""
    started = [e for e in growth if e <= epoch]
    return growth[max(started)] if started else 1


def schedule_keywords(schedule) -> dict:
    """The keywords train.py bound into the module's schedule (``peak_lr``, ``steps_per_epoch``, ...).

    Callbacks that derive another hyperparameter from the LR schedule read them here."""
    keywords = getattr(schedule, "keywords", None)
    if not isinstance(keywords, dict) or "peak_lr" not in keywords:
        raise TypeError("the module's lr_schedule must be a functools.partial of a schedule with peak_lr bound")
    return keywords


def unwrap_schedule(schedule) -> tuple[dict, object]:
    """(every keyword bound into ``schedule``, the function they are bound to), through nested partials (Hydra's
    ``_partial_`` is one too) and a batch-growth wrapper's ``base``: the outermost binding wins, as when the
    partial is called."""
    keywords, function = {}, schedule
    while function is not None and isinstance(getattr(function, "keywords", None), dict):
        keywords = {**function.keywords, **keywords}
        function = getattr(function, "func", None) or getattr(function, "base", None)
    return keywords, function


def phase_steps(schedule) -> tuple[int, int]:
    """(warmup end, decay end) of a bound schedule, in steps, as the schedule itself counts them.

    A source schedule whose boundaries are not epochs x ``steps_per_epoch`` (TF's ``w_steps = epochs * N // B``,
    Fujitsu's explicit ``decay_steps``) carries a ``phase_steps`` function of its own keywords; the shapes here
    warm up for ``warmup_steps`` or ``round(warmup_epochs * steps_per_epoch)`` steps and decay until
    ``total_steps`` or ``round(total_epochs * steps_per_epoch)``. The card and the plan print these numbers."""
    keywords, function = unwrap_schedule(schedule)
    own = getattr(function, "phase_steps", None)
    if own is not None:
        return own(**keywords)
    per_epoch = keywords.get("steps_per_epoch", 0)
    warmup = keywords.get("warmup_steps")
    if warmup is None:
        warmup = round(keywords.get("warmup_epochs", 0) * per_epoch)
    decay_end = keywords.get("total_steps")
    if decay_end is None:
        decay_end = max(round(keywords.get("total_epochs", 0) * per_epoch), warmup + 1)
    return int(warmup), int(decay_end)


def build_lr_schedule(scheduler: Mapping, global_size: int, steps_per_epoch: int,
                      total_epochs: float) -> tuple[functools.partial, float]:
    """A ``conf/scheduler`` node -> (pure ``step -> lr`` function, peak LR).

    ``base_lr`` at ``base_batch`` images is scaled to ``global_size`` by `scaling.scale_lr` (the one place);
    the remaining keys are the shape (``_target_`` + ``_partial_``). The result is one flat
    ``functools.partial`` whose ``keywords`` hold every bound argument (see `schedule_keywords`).
    """
    from hydra.utils import instantiate  # config-time only: the schedules themselves stay plain Python

    from lightning_lars.schedules.scaling import scale_lr

    shape = dict(scheduler)
    peak_lr = scale_lr(shape.pop("base_lr"), shape.pop("base_batch"), global_size)
    schedule = functools.partial(instantiate(shape), peak_lr=peak_lr, steps_per_epoch=steps_per_epoch,
                                 total_epochs=total_epochs)
    return schedule, peak_lr


class GrownBatchSchedule:
    """``step -> lr`` for a run whose batch grows: the base schedule read at the same epoch, times the batch
    factor when ``scale_lr`` (linear scaling, Goyal et al. sec. 2.1). Pure, like every schedule here."""

    def __init__(self, base, steps_per_epoch: int, growth: Mapping[int, int], scale_lr: bool):
        self.base, self.steps_per_epoch, self.growth, self.scale_lr = base, steps_per_epoch, dict(growth), scale_lr
        self.keywords = schedule_keywords(base)

    def __call__(self, step: int) -> float:
        base_step, factor = batch_growth(step, steps_per_epoch=self.steps_per_epoch, growth=self.growth)
        return self.base(base_step) * (factor if self.scale_lr else 1)
