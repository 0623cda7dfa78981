"""FFCV image pipelines from config: a list of named ops per split, validated before FFCV sees them.

Config form (one list per split; an entry is a name or a one-key mapping name -> arguments)::

    train: [{random_resized_crop: {scale: [0.08, 1.0], ratio: [0.75, 1.3333]}}, flip,
            {normalize: imagenet}, to_tensor, to_device, channels_last]
    val:   [{center_crop: {ratio: 0.875}}, {normalize: imagenet}, to_tensor, to_device, channels_last]

Ops run in three stages. numpy stage (CPU-jitted by FFCV): a decoder first (``random_resized_crop`` or
``center_crop``; resolution comes from the DataModule), then ``flip``, ``normalize``. ``to_tensor`` ends it.
Tensor stage: ``to_device`` (a non-blocking copy on CUDA; nothing to do on CPU), then ``channels_last``
(NCHW view in channels-last memory, no copy) or ``to_torch_image`` (contiguous NCHW copy). A ``normalize``
after that is the GPU variant (ffcv-imagenet normalises on the GPU after ``ToDevice``): FFCV then ships uint8
(4x fewer bytes to copy) and the DataModule normalises in ``on_after_batch_transfer`` on the main stream, so
no tensor allocated on FFCV's side stream is reused while the training step still reads it.
A jitted op after a torch op makes FFCV loop forever in ``Graph.group_operations``, so those orders are
refused here with the order to use, and ``ffcv_ops.check_ffcv_op_order`` re-checks the built ops.
Parsing and validation need no FFCV (the torchvision DataModule and the device decoders use them too); the FFCV
operations are built in ``ffcv_ops``, which imports FFCV only when called, so the package imports where FFCV is
not installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from lightning_lars.core.errors import UserError

# Pixel units (0-255): FFCV normalises uint8 images through a lookup table.
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
NORMALIZE_STATS = {"imagenet": (IMAGENET_MEAN, IMAGENET_STD)}

GOOD_ORDER = "[random_resized_crop or center_crop, flip, normalize, to_tensor, to_device, channels_last]"

# name -> allowed argument keys
KNOWN_OPS: dict[str, set[str]] = {
    "random_resized_crop": {"scale", "ratio"},
    "center_crop": {"ratio"},
    "flip": {"prob"},
    "normalize": {"stats", "mean", "std"},
    "to_tensor": set(),
    "to_device": set(),
    "channels_last": set(),
    "to_torch_image": set(),
}
# An op's arguments where a config leaves them out, filled in by `parse_pipeline` so that every loader reads the
# same value: torchvision's RandomResizedCrop (scale, ratio) and RandomHorizontalFlip (p), ffcv-imagenet's centre
# crop (crop side / short side 224/256: "resize 256, crop 224").
OP_DEFAULTS: dict[str, dict] = {
    "random_resized_crop": {"scale": (0.08, 1.0), "ratio": (3 / 4, 4 / 3)},
    "center_crop": {"ratio": 224 / 256},
    "flip": {"prob": 0.5},
}
# ImageNet's train and eval transforms: what either DataModule reads when a config gives no pipeline
DEFAULT_PIPELINE = {
    "train": [
        "random_resized_crop",
        "flip",
        {"normalize": "imagenet"},
        "to_tensor",
        "to_device",
        "channels_last",
    ],
    "val": [
        "center_crop",
        {"normalize": "imagenet"},
        "to_tensor",
        "to_device",
        "channels_last",
    ],
}

DECODERS = {"random_resized_crop", "center_crop"}
NUMPY_ONLY_OPS = {"flip"}  # jitted by FFCV; only valid before to_tensor
TORCH_IMAGE_OPS = {"channels_last", "to_torch_image"}


@dataclass(frozen=True)
class Op:
    """One configured op: its name and its arguments."""

    name: str
    args: Mapping = field(default_factory=dict)


class TorchNormalize(torch.nn.Module):
    """uint8 NCHW -> float32 ``(x - mean) / std`` on the tensor's device; keeps channels-last layout.

    The statistics are copied to a device once and kept there: a copy from pageable host memory at every
    batch would make the host wait for the GPU at every step.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.device not in self._on_device:
            self._on_device[images.device] = (self.mean.to(images.device), self.std.to(images.device))
        mean, std = self._on_device[images.device]
        return (images.float() - mean) / std


def parse_pipeline(split: str, entries: Sequence) -> tuple[Op, ...]:
    """Config entries -> validated ops. Raises ``UserError`` naming the fix for any bad order or key."""
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence) or not entries:
        raise UserError(f"data.pipeline.{split} must be a non-empty list of ops, e.g. {GOOD_ORDER}")
    ops = tuple(_parse_entry(split, entry) for entry in entries)
    _validate_order(split, ops)
    return ops


def _parse_entry(split: str, entry) -> Op:
    if isinstance(entry, str):
        name, args = entry, {}
    elif isinstance(entry, Mapping) and len(entry) == 1:
        ((name, args),) = entry.items()
        if args is None:
            args = {}
        elif name == "normalize" and isinstance(args, str):
            args = {"stats": args}
        elif not isinstance(args, Mapping):
            raise UserError(f"data.pipeline.{split}: arguments of {name!r} must be a mapping, got {args!r}")
    else:
        raise UserError(f"data.pipeline.{split}: each op is a name or a one-key mapping, got {entry!r}")
    if name not in KNOWN_OPS:
        raise UserError(f"data.pipeline.{split}: unknown op {name!r}; known ops: {sorted(KNOWN_OPS)}")
    unknown = set(args) - KNOWN_OPS[name]
    if unknown:
        raise UserError(
            f"data.pipeline.{split}: {name} takes {sorted(KNOWN_OPS[name]) or 'no arguments'}, got {sorted(unknown)}"
        )
    if name == "normalize":
        normalize_stats(split, args)  # validate now, not when the loader starts
    return Op(name, {**OP_DEFAULTS.get(name, {}), **args})


def _validate_order(split: str, ops: tuple[Op, ...]) -> None:
    where = f"data.pipeline.{split}"
    names = [op.name for op in ops]
    if names[0] not in DECODERS:
        raise UserError(
            f"{where} must start with a decoder (random_resized_crop or center_crop): {GOOD_ORDER}"
        )
    for name in ("random_resized_crop", "center_crop", "normalize", "to_tensor", "to_device"):
        if names.count(name) > 1:
            raise UserError(f"{where}: {name} appears {names.count(name)} times; use it once: {GOOD_ORDER}")
    if sum(name in DECODERS for name in names) > 1:
        raise UserError(f"{where}: use one decoder (random_resized_crop or center_crop), not both")
    if sum(name in TORCH_IMAGE_OPS for name in names) != 1:
        raise UserError(f"{where} needs exactly one of channels_last or to_torch_image: {GOOD_ORDER}")
    if "normalize" not in names:
        raise UserError(f"{where} has no normalize; add {{normalize: imagenet}}: {GOOD_ORDER}")

    stage = "numpy"  # numpy -> tensor (HWC torch) -> image (NCHW torch)
    for op in ops[1:]:
        if op.name in DECODERS:
            raise UserError(f"{where}: the decoder {op.name} must be the first op: {GOOD_ORDER}")
        if stage != "numpy" and op.name in NUMPY_ONLY_OPS:
            raise UserError(
                f"{where}: {op.name} is a CPU-jitted op after to_tensor, an order on which FFCV hangs forever;"
                f" put numpy ops before to_tensor: {GOOD_ORDER}"
            )
        if op.name == "normalize" and stage == "tensor":
            raise UserError(
                f"{where}: normalize between to_tensor and {'/'.join(sorted(TORCH_IMAGE_OPS))} would be a jitted op"
                f" after a torch op (FFCV hangs); normalize before to_tensor (CPU) or after channels_last (GPU)"
            )
        if stage == "image" and op.name != "normalize":
            raise UserError(f"{where}: only normalize may follow channels_last/to_torch_image: {GOOD_ORDER}")
        if op.name == "to_tensor":
            stage = "tensor"
        elif op.name in TORCH_IMAGE_OPS or op.name == "to_device":
            if stage == "numpy":
                raise UserError(f"{where}: {op.name} needs a tensor; put to_tensor before it: {GOOD_ORDER}")
            if op.name in TORCH_IMAGE_OPS:
                stage = "image"
    if stage != "image":
        raise UserError(f"{where} must end with torch images (to_tensor, ..., channels_last): {GOOD_ORDER}")


def normalize_stats(split: str, args: Mapping) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if "stats" in args:
        if args["stats"] not in NORMALIZE_STATS or {"mean", "std"} & set(args):
            raise UserError(
                f"data.pipeline.{split}: normalize takes stats in {sorted(NORMALIZE_STATS)} or explicit mean and"
                f" std (0-255 pixel units), got {dict(args)}"
            )
        return NORMALIZE_STATS[args["stats"]]
    if not {"mean", "std"} <= set(args):
        raise UserError(f"data.pipeline.{split}: normalize needs stats: imagenet or both mean and std")
    mean, std = tuple(float(x) for x in args["mean"]), tuple(float(x) for x in args["std"])
    if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
        raise UserError(
            f"data.pipeline.{split}: normalize mean/std need 3 values each, std > 0 (0-255 units)"
        )
    return mean, std


def post_transfer_normalize(ops: Sequence[Op]) -> TorchNormalize | None:
    """The torch normalisation to apply after the batch reached its device, or None if FFCV normalises."""
    names = [op.name for op in ops]
    if names.index("normalize") < names.index("to_tensor"):
        return None
    mean, std = normalize_stats("", ops[names.index("normalize")].args)
    return TorchNormalize(mean, std)


def without_augmentation(ops: Sequence[Op], val_ops: Sequence[Op]) -> tuple[Op, ...]:
    """Train ops with random parts removed (Fujitsu's last epochs): the random crop becomes the val centre crop
    and ``flip`` is dropped. Order and tensor ops stay as configured."""
    val_crop = next(
        (op for op in val_ops if op.name == "center_crop"), Op("center_crop", OP_DEFAULTS["center_crop"])
    )
    result = []
    for op in ops:
        if op.name == "random_resized_crop":
            result.append(val_crop)
        elif op.name not in NUMPY_ONLY_OPS:
            result.append(op)
    return tuple(result)
