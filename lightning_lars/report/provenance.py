"""What produced a run: git SHA and dirty flag, library versions, GPUs (modded-nanogpt's rule)."""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess

from lightning_lars.config.paths import PACKAGE_DIR, PROJECT_ROOT

LIBRARIES = (
    "torch",
    "torchvision",
    "lightning",
    "timm",
    "ffcv",
    "hydra-core",
    "wandb",
    "torchmetrics",
    "numpy",
)
# The tested sets (requirements/*.txt, shipped inside the package too): which one a run used goes in its log.
REQUIREMENT_SETS = {"newest": "lock-newest.txt", "oldest": "oldest.txt"}
REQUIREMENTS_DIR = PACKAGE_DIR / "requirements"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10, check=False
        )
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


def read_pins(path) -> dict[str, str]:
    """``name==version`` lines of a requirements file -> {normalised name: version}; comments skipped."""
    pins = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def requirement_set(versions: dict[str, str | None] | None = None) -> dict[str, object]:
    """Which tested set the libraries in use match: ``{"name": "newest" | "oldest" | "untested", "differs": {...}}``.

    Compared on ``LIBRARIES`` (the ones whose version changes results). ``differs``: for an untested set, each
    library whose version is not the newest lock's, as ``{name: [in use, locked]}``."""
    versions = library_versions() if versions is None else versions
    in_use = {
        name: version for name, version in versions.items() if name in LIBRARIES and version is not None
    }
    pins = {
        name: read_pins(REQUIREMENTS_DIR / file)
        for name, file in REQUIREMENT_SETS.items()
        if (REQUIREMENTS_DIR / file).is_file()
    }
    for name, pinned in pins.items():
        if all(pinned.get(lib) == version for lib, version in in_use.items()):
            return {"name": name, "differs": {}}
    newest = pins.get("newest", {})
    return {
        "name": "untested",
        "differs": {lib: [v, newest.get(lib)] for lib, v in in_use.items() if newest.get(lib) != v},
    }


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
    versions = library_versions()
    return {
        **git_state(),
        "versions": versions,
        "requirement_set": requirement_set(versions),
        "gpus": gpu_description(),
        "host": platform.node(),
    }
