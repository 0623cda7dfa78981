"""The SGD share of Akiba et al. 2017's RMSprop warm-up (PFN's ImageNet in 15 minutes), step by step."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SgdFractionElu:
    """The weight of the SGD term, 1 minus that of RMSprop (`lightning_lars.optim.rmsprop_warmup`).

    An ELU-shaped ramp in epochs ``e = step / steps_per_epoch`` (continuous with a continuous slope, both
    1/period at the centre)::

        e <  c:           0.5 * exp(2 (e - c) / p)
        e <  c + p / 2:   0.5 + (e - c) / p
        otherwise:        1                        (pure momentum SGD)

    with ``c = center_epochs`` (beta_center, 10) and ``p = period_epochs`` (beta_period, 5).
    """

    steps_per_epoch: int
    center_epochs: float = 10.0
    period_epochs: float = 5.0

    def __call__(self, step: int) -> float:
        epoch = step / self.steps_per_epoch
        if epoch < self.center_epochs:
            return 0.5 * math.exp(2.0 * (epoch - self.center_epochs) / self.period_epochs)
        if epoch < self.center_epochs + self.period_epochs / 2:
            return 0.5 + (epoch - self.center_epochs) / self.period_epochs
        return 1.0
