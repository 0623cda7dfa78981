"""Input files checked before Hydra, Lightning or W&B start, so a bad one is the only line the user sees."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

# not from ffcv_datamodule: importing FFCV takes ~10 s, and these checks run before anything heavy
from lightning_lars.data.beton_header import read_num_samples
from lightning_lars.errors import UserError

MANIFEST_NAME = "manifest.json"  # written by lightning_lars.data.prepare beside the .beton files


def check_dataset(cfg: DictConfig) -> None:
    """A missing, truncated or foreign ``.beton`` named by the data config: one-line `UserError` naming the
    command that makes it (the data config's ``prepare_command``); a ``data.num_classes`` that disagrees with
    the prepared data's ``manifest.json``: one line naming the value to set. Data configs without .beton paths
    pass."""
    data = cfg.get("data") or {}
    try:
        command = data.get("prepare_command", "make prepare src=<imagefolder> out=<dir>")
        paths = [data.get(key) for key in ("train_path", "val_path")]
        num_classes = data.get("num_classes")
    except OmegaConfBaseException:  # a path that needs Hydra's runtime: the DataModule checks it later
        return
    betons = [path for path in paths if isinstance(path, str) and path.endswith(".beton")]
    for path in betons:
        read_num_samples(path, command)
    if betons and isinstance(num_classes, int):
        check_num_classes(Path(betons[0]).parent / MANIFEST_NAME, num_classes)


def check_num_classes(manifest_path: Path, num_classes: int) -> None:
    """Labels beyond ``num_classes`` would be an IndexError deep in the loss; a narrower label set wastes logits
    silently. Both are a one-line error here. No manifest (a .beton made elsewhere): nothing to compare."""
    try:
        prepared = json.loads(manifest_path.read_text()).get("num_classes")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(prepared, int) and prepared != num_classes:
        raise UserError(f"data.num_classes={num_classes} but the prepared data in {manifest_path.parent} has"
                        f" {prepared} classes ({manifest_path.name}): set data.num_classes={prepared}")
