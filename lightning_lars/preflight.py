"""Input files checked before Hydra, Lightning or W&B start, so a bad one is the only line the user sees."""

from __future__ import annotations

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from lightning_lars.extras import needs_ffcv, require_ffcv

# Hydra flags that print (config, help, info) and run no job: nothing to check on disk for them.
PRINT_ONLY_FLAGS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc")


def prints_only(argv: list[str]) -> bool:
    """Whether the command line asks Hydra to print something instead of training."""
    return any(arg.split("=", 1)[0] in PRINT_ONLY_FLAGS for arg in argv)


def check_dataset(cfg: DictConfig) -> None:
    """FFCV installed when the data config needs it, and no missing, truncated or foreign ``.beton`` named by
    the data config: one-line `UserError` naming the command that fixes it (the data config's
    ``prepare_command``). Data configs without .beton paths pass."""
    data = cfg.get("data") or {}
    if needs_ffcv(data.get("_target_")):
        require_ffcv("the FFCV DataModule (this recipe's data)",
                     "train from image folders with data=imagefolder data.root=DIR, or time the model alone with"
                     " data=synthetic")
    try:
        command = data.get("prepare_command", "make prepare src=<imagefolder> out=<dir>")
        paths = [data.get(key) for key in ("train_path", "val_path")]
    except OmegaConfBaseException:  # a path that needs Hydra's runtime: the DataModule checks it later
        return
    if any(isinstance(path, str) and path.endswith(".beton") for path in paths):
        from lightning_lars.data.ffcv_datamodule import read_num_samples  # imports FFCV

        for path in paths:
            if isinstance(path, str) and path.endswith(".beton"):
                read_num_samples(path, command)
