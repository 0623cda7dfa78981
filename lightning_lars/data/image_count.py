"""The training images a data config names, counted on disk (an image folder) or read from a ``.beton``'s header,
so that the plan can say before the run whether they hold one global batch."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig

from lightning_lars.core.extras import needs_ffcv
from lightning_lars.data.beton_header import read_num_samples
from lightning_lars.data.checks import PREPARE, plain_value

# torchvision's ImageFolder takes these (torchvision.datasets.folder.IMG_EXTENSIONS), matched case-insensitively
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def count_train_images(cfg: DictConfig, up_to: int) -> int | None:
    """The training images of ``cfg``'s data, counted up to ``up_to`` (an ImageNet tree is 1.28 M files: only
    whether it holds one global batch matters here); None where the data is not on disk (synthetic) or its
    path needs Hydra's runtime. A ``.beton`` says its count in its header."""
    data = cfg.get("data") or {}
    root = plain_value(data, "root")
    if not needs_ffcv(data.get("_target_")) and root:
        found = 0
        for folder in sorted(os.scandir(Path(root) / "train"), key=lambda e: e.name):
            # ImageFolder walks each class folder to any depth, following links
            for _, _, names in os.walk(folder.path, followlinks=True) if folder.is_dir() else ():
                found += sum(1 for name in names if name.lower().endswith(IMAGE_EXTENSIONS))
                if found >= up_to:
                    return found
        return found
    path = plain_value(data, "train_path")
    if isinstance(path, str) and path.endswith(".beton") and os.path.isfile(path):
        return read_num_samples(path, PREPARE.format(out=Path(path).parent))
    return None
