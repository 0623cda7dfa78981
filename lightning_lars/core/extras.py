"""Optional dependencies: found at run time, and a one-line error naming the install command when missing.

FFCV needs a C compiler and Debian's libturbojpeg/OpenCV headers to build, which a user without root or on a
preinstalled GPU image may not have. So the package imports without it; only the FFCV DataModule and the
ImageFolder -> FFCV conversion need it, and choosing them without FFCV stops here with the command to run.
"""

from __future__ import annotations

import importlib

from lightning_lars.core.errors import UserError

FFCV_SYSTEM_PACKAGES = "libturbojpeg0-dev libopencv-dev pkg-config"
FFCV_INSTALL = (
    f"pip install 'lightning-lars[ffcv]' (it compiles against Debian's {FFCV_SYSTEM_PACKAGES}:"
    f" sudo apt-get install {FFCV_SYSTEM_PACKAGES})"
)
FFCV_TARGETS = ("lightning_lars.data.ffcv_datamodule.",)


def ffcv_import_error() -> ImportError | None:
    """Why ``import ffcv`` fails here, or None. Imports it (seconds: numba), as the run then needs it anyway;
    a package that is present but broken (e.g. libturbojpeg missing at run time) counts as failing."""
    try:
        importlib.import_module("ffcv")
    except ImportError as error:
        return error
    return None


def ffcv_available() -> bool:
    return ffcv_import_error() is None


def require_ffcv(what: str, alternative: str = "") -> None:
    """``UserError`` naming the install command when FFCV does not import. ``what``: the feature that needs it."""
    error = ffcv_import_error()
    if error is None:
        return
    hint = f"; or {alternative}" if alternative else ""
    if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "ffcv":
        raise UserError(f"{what} needs FFCV, which is not installed: {FFCV_INSTALL}{hint}")
    first_line = (str(error).splitlines() or [type(error).__name__])[0]
    raise UserError(
        f"{what} needs FFCV, which is installed but does not import ({first_line}): reinstall it"
        f" with {FFCV_INSTALL}{hint}"
    )


def needs_ffcv(target: object) -> bool:
    """Whether a config ``_target_`` is one of our FFCV classes."""
    return isinstance(target, str) and target.startswith(FFCV_TARGETS)
