"""The training images a run trains on, counted before torch loads so that the run is planned once, at the size
it trains on: the files of an image folder (as torchvision's ImageFolder finds them), a ``.beton``'s header less
its held-out share (the FFCV datamodule's ``holdout``), or the size a synthetic data config says it stands for.
Each equals the datamodule's ``num_train_images`` (`lightning_lars.training.recipe_plan.plan_run` holds it to that)."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig

from lightning_lars.core.extras import needs_ffcv
from lightning_lars.data.beton_header import read_num_samples
from lightning_lars.data.checks import PREPARE, plain_value
from lightning_lars.data.holdout import held_count

# torchvision's ImageFolder takes these (torchvision.datasets.folder.IMG_EXTENSIONS), matched case-insensitively
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def count_train_images(cfg: DictConfig) -> int | None:
    """The images ``cfg``'s data trains on (its files checked by `checks.check_dataset` first); None where the
    data config names no count or files (a datamodule of the user's own) or its path needs Hydra's runtime. An
    ImageNet tree is 1.28 M files, walked here and again by the datamodule (not timed on ImageNet)."""
    data = cfg.get("data") or {}
    root = plain_value(data, "root")
    if not needs_ffcv(data.get("_target_")) and root:
        found = 0
        for folder in sorted(os.scandir(Path(root) / "train"), key=lambda e: e.name):
            # ImageFolder walks each class folder to any depth, following links
            for _, _, names in os.walk(folder.path, followlinks=True) if folder.is_dir() else ():
                found += sum(1 for name in names if name.lower().endswith(IMAGE_EXTENSIONS))
        return found
    path = plain_value(data, "train_path")
    if isinstance(path, str) and path.endswith(".beton") and os.path.isfile(path):
        total = read_num_samples(path, PREPARE.format(out=Path(path).parent))
        share = float(plain_value(data, "holdout") or 0.0)
        return total - held_count(total, share) if share else total
    stands_for = plain_value(data, "num_train_images")  # synthetic data: the epoch length it stands for
    return int(stands_for) if isinstance(stands_for, int) and not isinstance(stands_for, bool) else None
