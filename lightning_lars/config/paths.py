"""Where the configs, recipes, data and logs are, in a checkout and in an installed wheel.

A checkout keeps the configs in the top-level ``conf/`` and the recipes in ``recipes/``; the wheel ships them
inside the package as ``lightning_lars/conf`` and ``lightning_lars/recipes`` (pyproject's package-dir maps the
folders; nothing is linked).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PROJECT_ROOT = PACKAGE_DIR.parent


def is_checkout() -> bool:
    """Running from a clone (pyproject.toml beside the package), not from an installed wheel."""
    return (PROJECT_ROOT / "pyproject.toml").is_file() and (PROJECT_ROOT / "recipes").is_dir()


def shipped(folder: str) -> Path:
    """``folder`` (conf, recipes) inside the installed package, else the checkout's top-level one."""
    inside = PACKAGE_DIR / folder
    return inside if inside.is_dir() else PROJECT_ROOT / folder


CONF_DIR = shipped("conf")
RECIPES_DIR = shipped("recipes")


def run_root() -> Path:
    """Where data/ and logs/ live by default: the checkout's root in a clone, the working directory when installed."""
    return PROJECT_ROOT if is_checkout() else Path.cwd()


# `${project_root:}` in conf/paths: data and logs default to folders of the checkout (or of the working
# directory when the package is installed) wherever the command runs.
OmegaConf.register_new_resolver("project_root", lambda: str(run_root()), replace=True)


# Each folder fresh_folder made in this process -> the outermost folder it made for it (the folder itself, or a
# parent that did not exist yet, e.g. logs/<recipe>/ on a recipe's first run): what a refused run takes back.
MADE_HERE: dict[Path, Path] = {}


def fresh_folder(path: str) -> str:
    """``path``, made here, or ``path-2``, ``path-3``, ... when a run already made it: mkdir is atomic, so two
    runs started in the same second (folders are named to the second) get a folder each, never one between
    them."""
    candidate, n = Path(path), 1
    while True:
        outermost = next((p for p in reversed(candidate.parents) if not p.exists()), candidate)
        try:
            candidate.mkdir(parents=True)
            MADE_HERE[candidate.resolve()] = outermost.resolve()
            return str(candidate)
        except FileExistsError:
            n += 1
            candidate = Path(f"{path}-{n}")


# `${fresh_folder:...}` in conf/hydra: cached per config, as Hydra's ${now:} is, so the folder is claimed once
# per run; a sweep's jobs get the cache of the sweep's config (Hydra's load_sweep_config): one sweep folder.
OmegaConf.register_new_resolver("fresh_folder", fresh_folder, use_cache=True, replace=True)


def unwritable_reason(folder: Path) -> str | None:
    """Why no run folder can be made under ``folder`` (missing parents are made), or None where one can. A
    folder is made and removed to find out: permissions alone miss a read-only or virtual file system (/proc),
    and root passes every permission check."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".lightning-lars-probe-", dir=existing))
    except OSError as err:
        return f"cannot make a folder in {existing}: {err.strerror}"
    return None


# `${unless_deterministic:${.deterministic}}` in conf/trainer: cuDNN's autotuner on, except where the run asks
# for deterministic kernels (true or "warn"), as torchvision's reference trainer does: Lightning warns that
# the two together leave torch.backends.cudnn.deterministic ignored.
OmegaConf.register_new_resolver(
    "unless_deterministic", lambda deterministic: deterministic in (False, None), replace=True
)
