"""Input files checked before Hydra, Lightning or W&B start, so a bad one is the only line the user sees."""

from __future__ import annotations

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from lightning_lars.data.ffcv_datamodule import read_num_samples


def check_dataset(cfg: DictConfig) -> None:
    """A missing, truncated or foreign ``.beton`` named by the data config: one-line `UserError` naming the
    command that makes it (the data config's ``prepare_command``). Data configs without .beton paths pass."""
    data = cfg.get("data") or {}
    try:
        command = data.get("prepare_command", "make prepare src=<imagefolder> out=<dir>")
        paths = [data.get(key) for key in ("train_path", "val_path")]
    except OmegaConfBaseException:  # a path that needs Hydra's runtime: the DataModule checks it later
        return
    for path in paths:
        if isinstance(path, str) and path.endswith(".beton"):
            read_num_samples(path, command)
