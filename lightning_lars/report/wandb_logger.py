"""A WandbLogger that never prompts and never stalls a run: online with credentials and a reachable server,
otherwise offline with a one-line notice.

Compute nodes often have no route to the internet while the user's key is present (``wandb login`` on a shared
home). wandb then retries for its ``init_timeout`` (90 s) and raises ``CommError`` from ``wandb.init``, which
Lightning calls while the run is being built. Here rank 0 first opens a TCP connection to the server (or the
HTTP(S) proxy) with a ``probe_timeout_s`` limit; refused or timed out means offline at once. A server that
accepts but does not answer (a hung proxy) is bounded by ``init_timeout_s``, after which the run goes offline too.
"""

from __future__ import annotations

import os
import shlex
import socket
from pathlib import Path
from urllib.parse import urlsplit

from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from lightning_lars.core.errors import UserError

DEFAULT_SERVER = "https://api.wandb.ai"


def has_credentials() -> bool:
    """True when W&B can authenticate without asking: WANDB_API_KEY, or a key saved by `wandb login`."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


def unreachable(base_url: str, timeout_s: float) -> str | None:
    """Why the W&B server (or the proxy in front of it) takes no TCP connection, or None when it does."""
    url = urlsplit(base_url)
    proxy = os.environ.get("HTTPS_PROXY" if url.scheme == "https" else "HTTP_PROXY") or os.environ.get(
        "https_proxy" if url.scheme == "https" else "http_proxy"
    )
    target = urlsplit(proxy) if proxy else url
    host, port = target.hostname, target.port or (443 if target.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as error:  # refused, no route, DNS failure, or the timeout
        reason = error.strerror or str(error) or type(error).__name__
        return f"{'proxy ' if proxy else ''}{host}:{port} unreachable ({reason})"


class FallbackWandbLogger(WandbLogger):
    """Lightning's WandbLogger; when the online ``wandb.init`` fails (server unreachable or silent beyond
    ``init_timeout``), the same run is created offline instead, with a one-line notice."""

    @property
    def experiment(self):
        import wandb  # only once the experiment is used: W&B takes seconds to import

        try:
            return super().experiment
        except wandb.errors.Error as error:  # CommError: timed out, refused, bad gateway
            if self._offline:
                raise
            _notice(f"W&B server did not answer ({str(error).splitlines()[0]})", self._wandb_init["dir"])
            self._offline, self._experiment = True, None
            self._wandb_init["mode"] = "offline"
            return super().experiment


def _notice(reason: str, save_dir: str) -> None:
    rank_zero_info(
        f"W&B: offline ({reason}); run written under {save_dir}/wandb,"
        f" upload it later with `wandb sync {shlex.quote(f'{save_dir}/wandb')}/offline-run-*`"  # the shell expands *
    )


def wandb_logger(
    project: str,
    save_dir: str,
    name: str | None = None,
    mode: str | None = None,
    probe_timeout_s: float = 3.0,
    init_timeout_s: float = 30.0,
    **kwargs,
) -> WandbLogger:
    """``mode``: "online", "offline" or None (= $WANDB_MODE, else online iff credentials exist).

    Lightning's WandbLogger creates the run on global rank 0 only, so there is one W&B run per training run.
    ``probe_timeout_s``: seconds to wait for a TCP connection to the server; ``init_timeout_s``: seconds
    ``wandb.init`` may take online before the run goes offline.
    """
    # WandbLogger uploads the files ModelCheckpoint reports to it; our Checkpoint reports none
    if kwargs.get("log_model"):
        raise UserError(
            "logger.log_model is not supported: checkpoints stay in the run folder"
            " (<output_dir>/checkpoints); drop logger.log_model"
        )
    reason = "asked for" if (mode or os.environ.get("WANDB_MODE")) else "no credentials configured"
    mode = mode or os.environ.get("WANDB_MODE") or ("online" if has_credentials() else "offline")
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    if mode == "online" and rank_zero_only.rank == 0:
        server = os.environ.get("WANDB_BASE_URL", DEFAULT_SERVER)
        problem = unreachable(server, probe_timeout_s)
        if problem:
            mode, reason = "offline", f"W&B server {problem}"
    if mode in ("offline", "dryrun"):
        _notice(reason, save_dir)
    settings = {"silent": True, "init_timeout": init_timeout_s, **kwargs.pop("settings", {})}
    logger = FallbackWandbLogger(
        project=project, save_dir=save_dir, name=name, offline=mode != "online", settings=settings, **kwargs
    )
    # Lightning passes anonymous=None: W&B warns at every start
    if logger._wandb_init.get("anonymous") is None:
        logger._wandb_init.pop("anonymous", None)
    return logger


def close_runs(loggers: list) -> None:
    """Ends the W&B run of each W&B logger among ``loggers``: the next run in this process (a sweep's next job
    under Hydra's basic launcher) then gets a run of its own, in its own folder, not this one again."""
    for logger in loggers:
        if isinstance(logger, WandbLogger) and logger._experiment is not None:  # never opened: nothing to end
            logger._experiment.finish()
