"""A WandbLogger that never prompts: online with credentials, otherwise offline with a one-line notice."""

from __future__ import annotations

import os
from pathlib import Path

from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info


def has_credentials() -> bool:
    """True when W&B can authenticate without asking: WANDB_API_KEY, or a key saved by `wandb login`."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


def wandb_logger(project: str, save_dir: str, name: str | None = None, mode: str | None = None, **kwargs) -> WandbLogger:
    """``mode``: "online", "offline" or None (= $WANDB_MODE, else online iff credentials exist).

    Lightning's WandbLogger creates the run on global rank 0 only, so there is one W&B run per training run.
    """
    reason = "asked for" if (mode or os.environ.get("WANDB_MODE")) else "no credentials configured"
    mode = mode or os.environ.get("WANDB_MODE") or ("online" if has_credentials() else "offline")
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    if mode in ("offline", "dryrun"):
        rank_zero_info(
            f"W&B: offline ({reason}); run written under {save_dir}/wandb,"
            f" upload it later with `wandb sync {save_dir}/wandb/offline-run-*`"
        )
    logger = WandbLogger(project=project, save_dir=save_dir, name=name, offline=mode != "online",
                         settings={"silent": True}, **kwargs)
    if logger._wandb_init.get("anonymous") is None:  # Lightning passes anonymous=None: W&B warns at every start
        logger._wandb_init.pop("anonymous", None)
    return logger
