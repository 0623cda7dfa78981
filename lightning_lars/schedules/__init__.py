"""Schedules as small frozen ``step -> value`` objects (LR, weight decay, batch growth, the RMSprop
blend), the published sources' own forms, and the one LR scaling rule with the global-batch plan.

phases (the clock and what every LR schedule exposes) < lr, source, batch_growth, rmsprop_blend < build.
Imports ``core``.
"""

from lightning_lars.schedules.batch_growth import BatchGrowth, GrownBatchSchedule
from lightning_lars.schedules.lr import CaffePoly, Piecewise, WarmupPoly, WarmupStep
from lightning_lars.schedules.phases import EpochClock, LRSchedule
from lightning_lars.schedules.rmsprop_blend import SgdFractionElu
from lightning_lars.schedules.scaling import scale_lr
from lightning_lars.schedules.source import FujitsuLR, FujitsuWeightDecay, MXNetPoly, TFLarsPoly

# the public API (README, "Python API"); pure Python, no torch: the command line's checks import this package
__all__ = [
    "BatchGrowth",
    "CaffePoly",
    "EpochClock",
    "FujitsuLR",
    "FujitsuWeightDecay",
    "GrownBatchSchedule",
    "LRSchedule",
    "MXNetPoly",
    "Piecewise",
    "SgdFractionElu",
    "TFLarsPoly",
    "WarmupPoly",
    "WarmupStep",
    "scale_lr",
]
