"""Validated pipeline ops (``pipelines.Op``) -> FFCV operations: the image decoder, flip and normalisation
(our seeded ops when a seed is given), the tensor ops, the label ops, and the check that no CPU-jitted op follows
a torch op (FFCV's ``Graph.group_operations`` would never return).

FFCV imports numba (~7 s on 2 cores), so each function imports it when called: the package imports where FFCV
is not installed. Imports ``core`` and ``data.pipelines``; ``data.seeded_ops`` when building.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from lightning_lars.core.errors import UserError
from lightning_lars.data import pipelines


def torch_side_ffcv_ops() -> tuple[type, ...]:
    """FFCV ops that run as torch code (non-jitted). Anything else is treated as jitted: conservative."""
    # FFCV imports numba (~7 s on 2 cores): only when an FFCV pipeline is built
    from ffcv.transforms import Convert, ModuleWrapper, Squeeze, ToDevice, ToTensor, ToTorchImage, View

    return (ToTensor, ToDevice, ToTorchImage, Convert, View, Squeeze, ModuleWrapper, torch.nn.Module)


def build_image_ops(
    ops: Sequence[pipelines.Op], resolution: int, device: torch.device, seed: int | None = None
) -> list:
    """Validated ops -> FFCV operations for one square ``resolution`` (px) on ``device``.

    ``seed``: random crop and flip draw from (seed, epoch, sample index) (``seeded_ops``; the DataModule sets the
    epoch), so runs and resumed runs repeat exactly. None: FFCV's own ops, seeded from OS entropy per process.
    A ``normalize`` after the tensor ops is left out here: see ``post_transfer_normalize``."""
    # FFCV (and our seeded ops, which subclass its ops) import numba: only when an FFCV pipeline is built
    from ffcv.fields.rgb_image import CenterCropRGBImageDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, ToDevice, ToTensor, ToTorchImage

    from lightning_lars.data.seeded_ops import (
        SeededRandomHorizontalFlip,
        SeededRandomResizedCropRGBImageDecoder,
    )

    built: list = []
    after_tensor = False
    for op in ops:
        if op.name == "random_resized_crop":
            scale = tuple(float(x) for x in op.args["scale"])
            ratio = tuple(float(x) for x in op.args["ratio"])
            if seed is None:
                built.append(
                    RandomResizedCropRGBImageDecoder((resolution, resolution), scale=scale, ratio=ratio)
                )
            else:
                built.append(
                    SeededRandomResizedCropRGBImageDecoder(
                        (resolution, resolution), scale=scale, ratio=ratio, seed=seed
                    )
                )
        elif op.name == "center_crop":
            # ratio = crop side / short side; 224/256 = 0.875 is "resize 256, centre crop 224"
            built.append(CenterCropRGBImageDecoder((resolution, resolution), ratio=float(op.args["ratio"])))
        elif op.name == "flip":
            prob = float(op.args["prob"])
            built.append(
                RandomHorizontalFlip(prob) if seed is None else SeededRandomHorizontalFlip(prob, seed=seed)
            )
        elif op.name == "normalize":
            if not after_tensor:
                mean, std = pipelines.normalize_stats("", op.args)
                built.append(NormalizeImage(np.array(mean), np.array(std), np.float32))
        elif op.name == "to_tensor":
            built.append(ToTensor())
            after_tensor = True
        elif op.name == "to_device":
            if device.type == "cuda":
                built.append(ToDevice(device, non_blocking=True))
        elif op.name in pipelines.TORCH_IMAGE_OPS:
            built.append(ToTorchImage(channels_last=op.name == "channels_last", convert_back_int16=False))
    check_ffcv_op_order(built)
    return built


def build_label_ops(device: torch.device) -> list:
    """Label pipeline: int64 labels of shape (batch,), copied to ``device`` without blocking on CUDA."""
    from ffcv.fields.basics import IntDecoder  # FFCV imports numba: only when an FFCV pipeline is built
    from ffcv.transforms import Squeeze, ToDevice, ToTensor

    ops = [IntDecoder(), ToTensor(), Squeeze(1)]  # (batch, 1) -> (batch,); a batch of one stays 1-D
    if device.type == "cuda":
        ops.append(ToDevice(device, non_blocking=True))
    return ops


def check_ffcv_op_order(ops: Sequence) -> None:
    """Refuse any FFCV op list with a jitted op after a torch op (FFCV's ``group_operations`` never returns)."""
    torch_side = torch_side_ffcv_ops()
    first_torch = next((i for i, op in enumerate(ops) if isinstance(op, torch_side)), None)
    if first_torch is None:
        return
    for op in ops[first_torch + 1 :]:
        if not isinstance(op, torch_side):
            raise UserError(
                f"FFCV pipeline puts {type(op).__name__} (CPU-jitted) after {type(ops[first_torch]).__name__}, an order"
                f" on which FFCV hangs forever; move numpy ops before ToTensor: {pipelines.GOOD_ORDER}"
            )
