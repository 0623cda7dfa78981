"""The order a validation pass reads its images in: one fixed permutation, the same for every run, rank and
evaluation.

ImageFolder trees and the .beton files `prepare` writes from them hold the images class by class. Read in that
order, a partial evaluation (``trainer.limit_val_batches``; the toy config's 2 batches) sees only the first
classes: the first 64 of the demo's 1000 val images are all class 0, and a model that guesses class 0 scores
100 % (seen in a fresh clone's ``make recipe=resnet50_32k debug=toy``, which then announced the 75.4 % target
reached). Under a fixed permutation every prefix is a uniform sample of the classes, and the same sample in
every run, so seeds and recipes are compared on the same images; a full pass still sees each image once, so a
full evaluation's top-1 is unchanged.
"""

from __future__ import annotations

import numpy as np

VAL_ORDER_SEED = 0  # fixed, not the run's seed: every run evaluates the same images in the same order


def val_order(num_samples: int) -> np.ndarray:
    """Indices 0..num_samples-1 in the fixed validation order (int64)."""
    return np.random.default_rng(VAL_ORDER_SEED).permutation(num_samples).astype(np.int64)
