"""A real ImageClassifier (timm's 0.4 M-parameter ``test_resnet``) and a real Trainer on in-memory images.

Shared by the callback tests: the callbacks run inside an actual Lightning fit, with our LARS or torch SGD.
"""

from __future__ import annotations

import functools

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_lars.optim.lars import LARS
from lightning_lars.training.module import ImageClassifier

NUM_CLASSES = 4
IMAGE_SIZE = 32


def images(
    num: int,
    seed: int = 0,
    learnable: bool = False,
    relabel_from: int | None = None,
    nan_at: int | None = None,
) -> TensorDataset:
    """Random images with balanced labels (image i has label i % 4).

    ``learnable``: each class adds its own fixed pattern, so a model learns the labels in a few steps.
    ``relabel_from``: from this index on, labels shift by one class: a model that learned the patterns is
    then confidently wrong and its loss explodes while its weights stay finite. ``nan_at``: that image is NaN.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    y = torch.arange(num) % NUM_CLASSES
    if learnable:
        patterns = torch.randn(
            NUM_CLASSES, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(99)
        )
        x = 0.3 * x + 2.0 * patterns[y]
    if relabel_from is not None:
        y[relabel_from:] = (y[relabel_from:] + 1) % NUM_CLASSES
    if nan_at is not None:
        x[nan_at] = float("nan")
    return TensorDataset(x, y)


def loader(dataset: TensorDataset, batch_size: int = 8) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, drop_last=True)


def classifier(
    optimizer: str = "lars", lr: float = 0.1, weight_decay: float = 1e-4, lr_schedule=None
) -> ImageClassifier:
    if optimizer == "lars":
        factory = functools.partial(LARS, momentum=0.9, weight_decay=weight_decay, trust_coefficient=0.001)
    else:
        factory = functools.partial(torch.optim.SGD, momentum=0.9, weight_decay=weight_decay)
    return ImageClassifier(
        "test_resnet", NUM_CLASSES, optimizer=factory, lr_schedule=lr_schedule or (lambda step: lr)
    )


def trainer(callbacks, tmp_path, **kwargs) -> L.Trainer:
    options = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "enable_progress_bar": False,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "default_root_dir": tmp_path,
    }
    options.update(kwargs)
    return L.Trainer(callbacks=callbacks, **options)
