"""A held-out share of the training images, for choosing a set-up and its learning rates without reading the
validation images a verdict is drawn from: a fixed seeded draw of the indices of train.beton, the same on every
machine (numpy's PCG64 from the seed), never trained on and evaluated instead of val.beton."""

from __future__ import annotations

import numpy as np

from lightning_lars.core.errors import UserError


def held_count(num_samples: int, share: float) -> int:
    """How many of ``num_samples`` images ``share`` holds out: round(share x num_samples), leaving both parts
    non-empty (else one `UserError` line). The plan's count of trained images uses the same rule."""
    if not 0 < share < 1:
        raise UserError(
            f"data.holdout={share}: the held-out share lies between 0 and 1 (0.1: a tenth of train)"
        )
    held = round(share * num_samples)
    if held < 1 or held >= num_samples:
        raise UserError(
            f"data.holdout={share} holds out {held} of {num_samples} images: pick a share that keeps both"
        )
    return held


def holdout_split(num_samples: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held): sorted int64 indices of 0..num_samples-1; held is `held_count` of them, drawn without
    replacement by ``np.random.default_rng(seed).permutation``."""
    held = held_count(num_samples, share)
    order = np.random.default_rng(seed).permutation(num_samples)
    return np.sort(order[held:]).astype(np.int64), np.sort(order[:held]).astype(np.int64)
