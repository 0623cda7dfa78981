"""Progressive resizing as a pure ``epoch -> resolution`` function (ffcv-imagenet's schedule).

Train at ``start`` px until ``start_ramp_epoch``, interpolate linearly to ``end`` px by ``end_ramp_epoch``
(rounded to a multiple of ``step`` px, so the decoder sees few distinct sizes and recompiles rarely), then
stay at ``end``. Evaluate at a separate, usually higher, ``val_resolution`` ("FixRes" train-test gap:
Touvron et al. 2019; ffcv-imagenet trains 160->192 px and evaluates at 256 px).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lightning_lars.core.errors import UserError


@dataclass(frozen=True)
class ResolutionSchedule:
    """Train resolution per epoch, in pixels (square crops).

    A fixed resolution is the special case ``start == end``.
    """

    start: int
    end: int
    start_ramp_epoch: int = 0
    end_ramp_epoch: int = 0
    step: int = 32  # px; ffcv-imagenet rounds to multiples of 32

    def __post_init__(self):
        if self.start <= 0 or self.end <= 0:
            raise UserError(f"resolution must be positive pixels, got start={self.start} end={self.end}")
        if self.start > self.end:
            raise UserError(f"progressive resizing grows: start={self.start} must be <= end={self.end}")
        if self.start != self.end and not 0 <= self.start_ramp_epoch < self.end_ramp_epoch:
            raise UserError(
                "progressive resizing needs 0 <= start_ramp_epoch < end_ramp_epoch, got "
                f"{self.start_ramp_epoch} and {self.end_ramp_epoch}"
            )
        if self.step <= 0:
            raise UserError(f"resolution step must be positive pixels, got {self.step}")

    def at_epoch(self, epoch: int) -> int:
        """Resolution in px for a 0-based ``epoch``."""
        return resolution_at(
            epoch,
            start=self.start,
            end=self.end,
            start_ramp_epoch=self.start_ramp_epoch,
            end_ramp_epoch=self.end_ramp_epoch,
            step=self.step,
        )

    @property
    def is_progressive(self) -> bool:
        return self.start != self.end


def resolution_at(
    epoch: int, *, start: int, end: int, start_ramp_epoch: int, end_ramp_epoch: int, step: int = 32
) -> int:
    """ffcv-imagenet's ``get_resolution``: constant, linear ramp rounded to ``step`` px, constant."""
    if start == end or epoch <= start_ramp_epoch:
        return start
    if epoch >= end_ramp_epoch:
        return end
    fraction = (epoch - start_ramp_epoch) / (end_ramp_epoch - start_ramp_epoch)
    interpolated = start + fraction * (end - start)
    return round(interpolated / step) * step


def resolution_schedule(spec: int | Mapping | ResolutionSchedule) -> ResolutionSchedule:
    """Build a schedule from config: an int (fixed px) or a mapping with ``start``, ``end``,
    ``start_ramp_epoch``, ``end_ramp_epoch`` and optional ``step``."""
    if isinstance(spec, ResolutionSchedule):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        return ResolutionSchedule(start=spec, end=spec)
    if isinstance(spec, Mapping):
        allowed = {"start", "end", "start_ramp_epoch", "end_ramp_epoch", "step"}
        unknown = set(spec) - allowed
        if unknown or not {"start", "end"} <= set(spec):
            raise UserError(
                f"data.resolution mapping needs start and end (px) and may set {sorted(allowed - {'start', 'end'})};"
                f" got keys {sorted(spec)}"
            )
        return ResolutionSchedule(**{key: int(value) for key, value in spec.items()})
    raise UserError(f"data.resolution must be an int (px) or a progressive-resize mapping, got {spec!r}")
