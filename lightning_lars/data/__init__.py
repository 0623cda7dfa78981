"""Data: the demo dataset, ImageFolder -> FFCV conversion, the Lightning DataModules, and the input files'
checks that run before anything heavy is imported.

Imports ``core``.
"""

import importlib

# The public API (README, "Python API"): name -> the module defining it. Loaded on first use (PEP 562), not here:
# the command line's data checks (`checks`, `image_count`) import this package before torch and Lightning are,
# and FFCVDataModule needs the optional FFCV.
EXPORTS = {
    "FFCVDataModule": "ffcv_datamodule",
    "TorchvisionDataModule": "torchvision_datamodule",
    "SyntheticDataModule": "synthetic",
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *EXPORTS])
