"""A held-out share of the training images, for choosing a set-up and its learning rates without reading the
validation images a verdict is drawn from: a fixed seeded draw of the indices of train.beton, the same on every
machine (numpy's PCG64 from the seed), never trained on and evaluated instead of val.beton."""

from __future__ import annotations

import numpy as np

from lightning_lars.core.errors import UserError


def holdout_split(num_samples: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held): sorted int64 indices of 0..num_samples-1; held is round(share x num_samples) of them, drawn
    without replacement by ``np.random.default_rng(seed).permutation``."""
    if not 0 < share < 1:
        raise UserError(
            f"data.holdout={share}: the held-out share lies between 0 and 1 (0.1: a tenth of train)"
        )
    held_count = round(share * num_samples)
    if held_count < 1 or held_count >= num_samples:
        raise UserError(
            f"data.holdout={share} holds out {held_count} of {num_samples} images: pick a share that keeps both"
        )
    order = np.random.default_rng(seed).permutation(num_samples)
    return np.sort(order[held_count:]).astype(np.int64), np.sort(order[:held_count]).astype(np.int64)
