"""Where the configs, recipes, data and logs are, in a checkout and in an installed wheel.

A checkout keeps the configs in the top-level ``conf/`` and the recipes in ``recipes/``; the wheel ships them
inside the package as ``lightning_lars/conf`` and ``lightning_lars/recipes`` (pyproject's package-dir maps the
folders; nothing is linked).
"""

from __future__ import annotations

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


def fresh_folder(path: str) -> str:
    """``path``, made here, or ``path-2``, ``path-3``, ... when a run already made it: mkdir is atomic, so two
    runs started in the same second (folders are named to the second) get a folder each, never one between
    them."""
    candidate, n = Path(path), 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return str(candidate)
        except FileExistsError:
            n += 1
            candidate = Path(f"{path}-{n}")


# `${fresh_folder:...}` in conf/hydra: cached per config, as Hydra's ${now:} is, so the folder is claimed once
# per run; a sweep's jobs get the cache of the sweep's config (Hydra's load_sweep_config): one sweep folder.
OmegaConf.register_new_resolver("fresh_folder", fresh_folder, use_cache=True, replace=True)
