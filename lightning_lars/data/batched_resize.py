"""One antialiased bilinear resize for a whole batch of differently sized crops: two batched matmuls instead of a
resize per image (about six kernel launches each: ~1,500 for a batch of 256, where the GPU waits on the host).

An antialiased bilinear resize is separable and linear: ``out = Wy @ crop @ Wx^T`` per channel, with ``Wy``
(side x crop height) and ``Wx`` (side x crop width) the triangle-filter weights torch's ``_upsample_bilinear2d_aa``
computes (aten/src/ATen/native/UpSample.h, ``_compute_weights_aa``): for output pixel ``i`` at scale ``s = in /
out``, the centre ``c = s (i + offset + 0.5)``, support ``max(s, 1)``, tap ``j`` weighted ``max(0, 1 - |(j - c +
0.5) / max(s, 1)|)`` for ``0 <= j < in``, then normalised to sum 1. Every crop is copied into one zero-padded
batch of its size group (one copy each; padded taps get weight 0), the weights of the batch are built on the device from
the crop sizes in a dozen elementwise kernels, and two batched matmuls resize it. Float32 throughout, TF32 off,
so the result equals the per-image resize to float rounding (tests/unit/test_device_decode_batched.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# pixel values after the resize are rounded as torchvision rounds a uint8 image's float resize
UINT8_MAX = 255.0
# px: crops up to this longer side share one padded batch (a 224-px recipe's usual crops)
SMALLEST_GROUP = 256


def aa_weights(
    in_sizes: torch.Tensor, out_full: torch.Tensor, offsets: torch.Tensor, side: int, padded: int
) -> torch.Tensor:
    """(N, side, padded) float32 weights of torch's antialiased bilinear along one axis.

    Args:
        in_sizes: (N,) input lengths, px (taps at and beyond a sample's length weigh 0).
        out_full: (N,) length each input is resized to, px (``side`` for a crop; more when a centre crop
            follows the resize).
        offsets: (N,) the first output pixel kept of ``out_full`` (0 for a crop).
        side: output pixels kept.
        padded: the batch's padded input length.
    """
    device = in_sizes.device
    sizes, full = in_sizes.to(torch.float64), out_full.to(torch.float64)
    scale = (sizes / full).view(-1, 1, 1)
    support = scale.clamp(min=1.0)  # the filter widens by the scale when shrinking
    out = torch.arange(side, device=device, dtype=torch.float64).view(1, -1, 1) + offsets.view(-1, 1, 1)
    centre = scale * (out + 0.5)
    taps = torch.arange(padded, device=device, dtype=torch.float64).view(1, 1, -1)
    weights = (1.0 - ((taps - centre + 0.5) / support).abs()).clamp(min=0.0)
    weights = weights * (taps < sizes.view(-1, 1, 1))
    return (weights / weights.sum(-1, keepdim=True)).to(torch.float32)


def size_group(height: int, width: int) -> int:
    """The group a crop is resized in: its longer side's next power of two, at least 256 px."""
    return max(SMALLEST_GROUP, 1 << (max(height, width) - 1).bit_length())


def resize_batch(
    crops: Sequence[torch.Tensor], side: int, out_full: Sequence[tuple[int, int]] | None = None, offsets=None
) -> torch.Tensor:
    """uint8 CHW crops of any sizes (one device) -> float32 (N, C, side, side), antialiased bilinear, rounded
    and clamped to 0-255 as torchvision's uint8 resize returns them.

    ``out_full``/``offsets``: per crop, the (height, width) it is resized to and the (top, left) of the kept
    ``side`` x ``side`` window (a resize followed by a centre crop); default: resized straight to ``side``.

    Crops are resized in groups of similar size (`size_group`), each padded to its own largest crop: one batch
    padded to its largest would give every crop a 2,000 px crop's padding (ImageNet's folders hold photos of
    several thousand px; 408 x 3 x 2,000^2 is 4.9 GB as bytes, four times that as the float the matmul reads)."""
    count = len(crops)
    full = torch.tensor(out_full if out_full is not None else [(side, side)] * count).view(count, 2)
    shift = torch.tensor(offsets if offsets is not None else [(0, 0)] * count).view(count, 2)
    groups: dict[int, list[int]] = {}
    for index, crop in enumerate(crops):
        groups.setdefault(size_group(*crop.shape[-2:]), []).append(index)
    if len(groups) == 1:
        return _resize_padded(crops, side, full, shift)
    device = crops[0].device
    resized = torch.empty(count, crops[0].shape[0], side, side, device=device)
    for members in groups.values():
        at = torch.tensor(members).to(device, non_blocking=True)  # staged host bytes: no wait for the GPU
        group = _resize_padded([crops[i] for i in members], side, full[members], shift[members])
        resized.index_copy_(0, at, group)
    return resized


def _resize_padded(crops: Sequence[torch.Tensor], side: int, full: torch.Tensor, shift: torch.Tensor):
    """`resize_batch` for crops padded into one batch; ``full``/``shift``: (N, 2) host tensors."""
    count, channels, device = len(crops), crops[0].shape[0], crops[0].device
    heights = torch.tensor([crop.shape[-2] for crop in crops])
    widths = torch.tensor([crop.shape[-1] for crop in crops])
    batch = torch.zeros(
        count, channels, int(heights.max()), int(widths.max()), dtype=torch.uint8, device=device
    )
    for slot, crop in zip(batch, crops, strict=True):
        slot[:, : crop.shape[-2], : crop.shape[-1]].copy_(crop)
    # non_blocking: CUDA stages the few host bytes and returns; a blocking copy would wait for every step queued
    on_device = torch.stack([heights, widths, full[:, 0], full[:, 1], shift[:, 0], shift[:, 1]])
    on_device = on_device.to(device, non_blocking=True)
    rows = aa_weights(on_device[0], on_device[2], on_device[4], side, batch.shape[-2])
    cols = aa_weights(on_device[1], on_device[3], on_device[5], side, batch.shape[-1])
    # TF32's 10-bit mantissa would move pixels by ~0.3 of a level. The per-backend setting, not the legacy
    # allow_tf32: touching that after set_float32_matmul_precision makes torch's getter raise (mixed APIs)
    matmul = torch.backends.cuda.matmul
    precision, matmul.fp32_precision = matmul.fp32_precision, "ieee"
    try:
        across = torch.matmul(batch.float(), cols.transpose(1, 2).unsqueeze(1))  # (N, C, H, side)
        resized = torch.matmul(rows.unsqueeze(1), across)  # (N, C, side, side)
    finally:
        matmul.fp32_precision = precision
    return resized.round_().clamp_(0.0, UINT8_MAX)
