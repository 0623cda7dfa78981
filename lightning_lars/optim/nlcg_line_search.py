"""NLCG's "Step" line search (step 6 of `lightning_lars.optim.nlcg.NLCG`'s docstring) on the optimizer's global
scalars, all on the device: loss EMAs, and every ``period`` steps a base-LR change with a share of the last
direction to take back, by loss-ratio band. Constants as in the authors' code, apple/ml-ncg at 563b5e5,
``ncg/optimization/optimization/ncg_core_tfop.py`` (``core``).

Imports torch only.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch import Tensor

LOSS_EMA_BETA = 0.7  # core line 42
MIN_BASE_LR = 1e-4  # core line 299
GROWTH = 1.05  # core line 333: the "Step" line search raises base_lr by 5 % up to 1
# core lines 355-392: loss-ratio bands (in units of line_search_threshold) -> (base_lr factor, share of the
# previous direction to take back); at or below the first band the base lr grows instead.
BANDS = (0.01, 0.025, 0.05, 0.075, 0.10, 0.125, 0.15)
DEGRADE = (1.0, 1.0, 0.975, 0.95, 0.9, 0.8, 0.7, 0.5)
TAKE_BACK = (0.0, 0.1, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
RHO, BASE_LR, LOSS_EMA, LOSS_EMA_OLD = range(4)  # entries of the per-parameter "scalars" vector


def line_search(
    new: Tensor,
    loss: Tensor,
    first: bool,
    check: bool,
    threshold: float,
    loss_group: dist.ProcessGroup | None,
) -> Tensor | None:
    """Step 6 on the scalars ``new`` (in place). At a check step returns ``[c, c * b / b']``: the share of
    d to take back and the factor of the previous direction (both 0 when b grows); else None."""
    if first:  # core lines 458-460 and 525-526 (the authors' first loss is step 0's)
        new[LOSS_EMA] = loss
        new[LOSS_EMA_OLD] = loss
        return None
    new[LOSS_EMA] = LOSS_EMA_BETA * new[LOSS_EMA] + (1.0 - LOSS_EMA_BETA) * loss
    if not check:
        return None
    emas = new[LOSS_EMA : LOSS_EMA_OLD + 1].clone()  # a slice: an index list would copy host to device
    group = loss_group if loss_group is not None else dist.group.WORLD
    if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.all_reduce(emas, op=dist.ReduceOp.SUM, group=group)  # the mean's ratio: sums suffice
    ratio = emas[0] / emas[1]
    bands, degrades, take_backs = _band_tables(threshold, new.dtype, new.device)
    band = torch.bucketize(ratio, bands)  # i: bands[i-1] < ratio <= bands[i]
    degrade, take_back = degrades[band], take_backs[band]
    grow = ratio < bands[0]
    old = new[BASE_LR].clone()
    new[BASE_LR] = torch.where(grow, (old * GROWTH).clamp(max=1.0), (old * degrade).clamp(min=MIN_BASE_LR))
    new[LOSS_EMA_OLD] = new[LOSS_EMA]
    return torch.where(grow, 0.0, take_back) * torch.stack([torch.ones_like(old), old / new[BASE_LR]])


@functools.lru_cache(maxsize=8)
def _band_tables(tau: float, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """The band edges ``1 + tau * BANDS``, DEGRADE and TAKE_BACK on the device, built once (no copy per check)."""
    edges = [1.0 + tau * x for x in BANDS]
    return tuple(torch.tensor(v, dtype=dtype, device=device) for v in (edges, DEGRADE, TAKE_BACK))
