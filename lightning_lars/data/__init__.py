"""Data: the demo dataset, ImageFolder -> FFCV conversion, the Lightning DataModules (with a seeded held-out
share of the training images for tuning, ``holdout``), and the input files' checks that run before anything
heavy is imported.

Imports ``core``.
"""

from lightning_lars.core.lazy_exports import lazy_exports

# The public API (README, "Python API"): name -> the module defining it. Loaded on first use (PEP 562), not here:
# the command line's data checks (`checks`, `image_count`) import this package before torch and Lightning are,
# and FFCVDataModule needs the optional FFCV.
EXPORTS = {
    "FFCVDataModule": "ffcv_datamodule",
    "TorchvisionDataModule": "torchvision_datamodule",
    "SyntheticDataModule": "synthetic",
}
__all__ = sorted(EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
