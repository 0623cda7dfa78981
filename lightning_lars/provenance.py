"""What produced a run: git SHA and dirty flag, library versions, GPUs (modded-nanogpt's rule)."""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess

from lightning_lars.config import PROJECT_ROOT

LIBRARIES = ("torch", "torchvision", "lightning", "timm", "ffcv", "hydra-core", "wandb", "torchmetrics", "numpy")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> dict[str, object]:
    """``{"git_sha": ..., "git_dirty": bool}``; None values outside a git checkout."""
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"git_sha": sha, "git_dirty": None if status is None else bool(status)}


def library_versions() -> dict[str, str | None]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    versions["python"] = platform.python_version()
    return versions


def gpu_description() -> str | None:
    """``nvidia-smi -L`` (one line per GPU), or None on a machine without NVIDIA GPUs."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def provenance() -> dict[str, object]:
    return {**git_state(), "versions": library_versions(), "gpus": gpu_description(), "host": platform.node()}
