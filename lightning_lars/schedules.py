"""Learning-rate schedules as pure ``step -> lr`` functions (nanoGPT's ``get_lr``, optax's schedules).

Every schedule takes the optimizer step (0-based, counted in optimizer steps, not micro-batches) and
keyword-only shape arguments, and returns the LR for that step. ``peak_lr`` is already scaled to the global
batch by `lightning_lars.scaling.scale_lr`; epochs are converted to steps with ``steps_per_epoch`` (images
per epoch // global batch, drop-last). Configs bind the shape with ``_partial_: true``;
`callbacks.schedule.ScheduleCallback` only applies the value.
"""

from __future__ import annotations

from collections.abc import Sequence


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
    if step < warmup_steps:
        return _warmup(step, warmup_steps, start_lr, peak_lr)
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return end_lr + (peak_lr - end_lr) * (1.0 - progress) ** power


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
