"""Per-tensor scalars over many tensors in a constant number of kernels, through a contiguous scratch buffer
with one view per tensor (as apex's multi-tensor LARS and Paddle's merged LARS lay their tensors out).

``torch._foreach_*`` ops take CUDA's multi-tensor fast path only when every list has the same sizes and
strides at each index; a list of 0-d per-tensor factors (LARS's trust ratios, LAMB's) beside the weights
fails it and launches one kernel per tensor: 54 of LARS's 73 launches per ResNet-50 step
(``op_count.count_launches``). `FlatScratch.spread` writes such a vector over the elements of views shaped
like the weights (one gather), and the same ``_foreach_addcmul_`` then runs on the fast path with the same
arithmetic per element. Weights and state stay the parameters' own tensors: checkpoints, ``load_state_dict``
and FSDP see torch.optim's per-parameter layout unchanged. The scratch also holds AMP's unscaled gradients
(``optim.loss_scale``), where one buffer lets a single kernel zero them all.

Memory: the buffer (4 bytes per element in fp32) and, once `FlatScratch.spread` ran, each element's tensor
index (int32): 8 bytes per adapted parameter, about 200 MB for ResNet-50, kept between steps.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor


def _dense(t: Tensor) -> bool:
    """Whether ``t`` fills exactly ``numel`` consecutive elements of its storage (the layouts parameters take)."""
    return t.is_contiguous() or (t.ndim == 4 and t.is_contiguous(memory_format=torch.channels_last))


class FlatScratch:
    """A buffer of ``sum(numel)`` elements (4 bytes each for fp32) and a view of it shaped and strided like each
    tensor of ``like``."""

    def __init__(self, like: list[Tensor]):
        first = like[0]
        self._like = like  # the list last checked: the usual next step hands over the same list
        sizes = [t.numel() for t in like]
        self.buffer = torch.empty(sum(sizes), dtype=first.dtype, device=first.device)
        self.views, offset = [], 0
        for t, size in zip(like, sizes):  # each view keeps its tensor's strides (channels_last too)
            self.views.append(self.buffer.as_strided(t.shape, t.stride(), offset))
            offset += size
        self._sizes = sizes
        self._segments: Tensor | None = None  # made at the first `spread`

    @staticmethod
    def fits(tensors: list[Tensor]) -> bool:
        """True if ``tensors`` can share one buffer: one dtype and device, each dense (not a DTensor)."""
        first = tensors[0]
        return all(
            not isinstance(t, DTensor) and t.dtype == first.dtype and t.device == first.device and _dense(t)
            for t in tensors
        )

    def holds(self, like: list[Tensor]) -> bool:
        """True if the views are laid out like ``like`` (else the caller builds a new scratch)."""
        if like is self._like:
            return True
        self._like = like
        return (
            len(like) == len(self.views)
            and like[0].dtype == self.buffer.dtype
            and like[0].device == self.buffer.device
            and all(v.shape == t.shape and v.stride() == t.stride() for v, t in zip(self.views, like))
        )

    def load(self, tensors: list[Tensor]) -> list[Tensor]:
        """Copy ``tensors`` into the views (one fast-path op); returns the views."""
        torch._foreach_copy_(self.views, tensors)
        return self.views

    def spread(self, per_tensor: Tensor) -> list[Tensor]:
        """The views filled with one value per tensor from the vector ``per_tensor`` (one gather kernel).

        The tensor index of every element (int32, 4 bytes per element) is made once, at the first call."""
        if self._segments is None:
            device = self.buffer.device
            index = torch.arange(len(self._sizes), dtype=torch.int32, device=device)
            counts = torch.tensor(self._sizes, device=device)
            self._segments = index.repeat_interleave(counts, output_size=self.buffer.numel())
        torch.index_select(per_tensor.to(self.buffer.dtype), 0, self._segments, out=self.buffer)
        return self.views


def scratch_for(cache: dict, key, like: list[Tensor]) -> FlatScratch | None:
    """``cache[key]``'s scratch if it still fits ``like``, a new one if ``like`` can be flat, else None."""
    scratch = cache.get(key)
    if scratch is not None and scratch.holds(like):
        return scratch
    if not like or not FlatScratch.fits(like):
        cache.pop(key, None)
        return None
    cache[key] = FlatScratch(like)
    return cache[key]
