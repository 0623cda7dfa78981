"""A ``conf/scheduler`` node -> the run's LR schedule object, with the LR scaled to the global batch.

The node names a schedule's constructor (``_target_``, e.g.
`lightning_lars.schedules.lr.WarmupPoly.from_epochs`) with ``_partial_: true`` and its shape keys; ``base_lr``
at ``base_batch`` images is read here. Hydra binds the shape; the rest is what the recipe plan knows (steps
per epoch, epochs of the run, global batch), bound here.
"""

from __future__ import annotations

from collections.abc import Mapping

from hydra.utils import instantiate

from lightning_lars.schedules.phases import EpochClock, LRSchedule
from lightning_lars.schedules.scaling import scale_lr

BOUND_HERE = ("clock", "peak_lr")  # the constructor arguments the plan supplies, not the config


def build_lr_schedule(
    scheduler: Mapping, global_size: int, steps_per_epoch: int, total_epochs: float
) -> LRSchedule:
    """The schedule of ``scheduler`` (a resolved ``conf/scheduler`` node) for a run of ``total_epochs`` epochs
    of ``steps_per_epoch`` steps at ``global_size`` images per step; its ``peak_lr`` is ``base_lr`` scaled by
    `scale_lr` (the one place)."""
    shape = dict(scheduler)
    peak_lr = scale_lr(shape.pop("base_lr"), shape.pop("base_batch"), global_size)
    constructor = instantiate(shape)  # functools.partial of the constructor, the shape keys bound
    return constructor(EpochClock(steps_per_epoch, total_epochs), peak_lr=peak_lr)
