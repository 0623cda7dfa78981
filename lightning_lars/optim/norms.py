"""Per-tensor L2 norms of whole parameters, in a few multi-tensor ops, exact under sharding.

Layer-wise optimizers need ``||w||`` and ``||g||`` of the *whole* parameter. When parameters are sharded
(FSDP2 DTensors, or FSDP1 flat shards with ``use_orig_params=True``) each rank holds a slice, and a norm of
the slice (what timm, torchlars and apex compute) is wrong. Here every rank computes the local sum of squares
of every tensor in one fixed order (0 where it holds nothing), all of them go through ONE ``all_reduce``
over the shard group, then one ``sqrt``. Dispatched ops do not grow with the number of tensors:
``_foreach_norm`` + ``stack`` per list, then a constant number of vector ops.

Norms are computed in fp32 (fp64 for fp64 tensors), also when parameters or gradients are bf16/fp16.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor

LOW_PRECISION = (torch.float16, torch.bfloat16)


def local(t: Tensor) -> Tensor:
    """The shard this rank holds: a DTensor's local tensor (no copy, no communication), else ``t`` itself.

    Reads ``_local_tensor`` because ``to_local()`` on a ``Parameter(DTensor)`` (every FSDP2 parameter)
    returns a fresh ``view_as``: one dispatched op per tensor per step, which this module exists to avoid.
    """
    if not isinstance(t, DTensor):
        return t
    return t._local_tensor if hasattr(t, "_local_tensor") else t.to_local()


def math_dtype(tensors: list[Tensor]) -> torch.dtype:
    """fp64 if any tensor is fp64, else fp32: the dtype for norms and optimizer math."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _shard_groups(p: Tensor, shard_group: dist.ProcessGroup | None) -> tuple:
    """The process groups over which ``p``'s local sums of squares must be summed (empty: not sharded)."""
    if isinstance(p, DTensor):
        mesh = p.device_mesh
        # Shard(d) on a mesh dim splits the tensor across that dim's ranks; Replicate holds copies.
        return tuple(mesh.get_group(i) for i, pl in enumerate(p.placements) if pl.is_shard())
    return (shard_group,) if shard_group is not None else ()


def global_norms(
    lists: list[list[Tensor]],
    params: list[Tensor],
    shard_group: dist.ProcessGroup | None = None,
    order: list[Tensor] | None = None,
    totals: bool = False,
    local_norms: list[Tensor] | None = None,
) -> list[Tensor]:
    """L2 norms of whole tensors, one 1-D vector per input list.

    Args:
        lists: lists of local tensors (shards), each aligned with ``params`` (e.g. weights and gradients).
        params: the parameters (possibly DTensors) that say how each entry is sharded.
        shard_group: for plain tensors that are shards of a larger parameter (FSDP1 ``use_orig_params=True``),
            the group the shards are spread over; None for unsharded tensors.
        order: with ``shard_group``: every parameter any rank may pass in ``params``, in one order that is
            the same on every rank (e.g. all parameters of the optimizer's groups). FSDP1 leaves ``grad=None``
            on ranks that hold no shard of a parameter, so ``params`` (those with a gradient) differ in length
            and order between ranks; the all-reduce then runs over ``order``'s slots, zeros where this rank
            holds nothing, so every rank reduces the same vector.
        totals: also return, last, a vector of each list's norm over ALL tensors (of ``order`` when given:
            LAMB's ||G|| needs the gradients this rank holds none of too).
        local_norms: the local norms already taken (e.g. inside a compiled update), one vector per list in
            ``math_dtype``; the lists are then not read again.

    Returns:
        For each list, a vector of ``len(params)`` norms in ``math_dtype``, identical on every rank.
    """
    n = len(params)
    slotted = shard_group is not None and bool(order)
    if n == 0 and not slotted:
        return [torch.zeros(0) for _ in lists] + ([torch.zeros(len(lists))] if totals else [])
    dtype = math_dtype([t for tensors in lists for t in tensors] or order)
    if n == 0:  # this rank holds no shard with a gradient, but must still join the all-reduce
        per_list = [torch.zeros(0, dtype=dtype, device=order[0].device) for _ in lists]
    elif local_norms is not None:
        per_list = [v.to(dtype) for v in local_norms]
    else:
        per_list = [torch.stack(torch._foreach_norm(tensors, 2, dtype=dtype)) for tensors in lists]
    if slotted:
        return _reduce_in_slots(per_list, params, order, shard_group, totals)
    norms = _reduce(per_list, params, shard_group)
    return norms + [torch.stack([torch.linalg.vector_norm(v) for v in norms])] if totals else norms


def _reduce(
    per_list: list[Tensor], params: list[Tensor], shard_group: dist.ProcessGroup | None
) -> list[Tensor]:
    """Whole norms from local ones: one all-reduce of the squares per set of shard groups."""
    n = len(params)
    plan: dict[tuple, list[int]] = {}
    for i, p in enumerate(params):
        groups = _shard_groups(p, shard_group)
        if groups:
            plan.setdefault(groups, []).append(i)
    if not plan:
        return per_list
    squares = torch.cat(per_list).square()  # [list0 norms..., list1 norms...]: sums of squares per shard
    for groups, idx in plan.items():
        whole = len(idx) == n
        if whole:  # the usual FSDP2 case: every tensor on one mesh, reduce the vector in place
            part = squares
        else:
            index = torch.tensor(
                [k * n + i for k in range(len(per_list)) for i in idx], device=squares.device
            )
            part = squares.index_select(0, index)
        for group in groups:
            dist.all_reduce(part, op=dist.ReduceOp.SUM, group=group)
        if not whole:
            squares.index_copy_(0, index, part)
    return list(squares.sqrt().split(n))


def _reduce_in_slots(
    per_list: list[Tensor], params: list[Tensor], order: list[Tensor], group: dist.ProcessGroup, totals: bool
) -> list[Tensor]:
    """Sum the squares of ``per_list`` over ``group`` in ``order``'s slots (same length on every rank)."""
    position = {id(p): i for i, p in enumerate(order)}
    slots = tuple(position[id(p)] for p in params)
    index = _slot_index(slots, len(order), len(per_list), per_list[0].device)
    squares = per_list[0].new_zeros(len(per_list) * len(order))
    squares.index_copy_(0, index, torch.cat(per_list).square())
    dist.all_reduce(squares, op=dist.ReduceOp.SUM, group=group)
    sums = [squares.view(len(per_list), len(order)).sum(1).sqrt()] if totals else []
    if not params:
        return [squares[:0] for _ in per_list] + sums
    return list(squares.index_select(0, index).sqrt().split(len(params))) + sums


@functools.lru_cache(maxsize=16)
def _slot_index(slots: tuple[int, ...], num_slots: int, num_lists: int, device: torch.device) -> Tensor:
    """Positions of list k's entries in the concatenated slot vector; cached: a host-to-device copy per step
    would synchronise (the set of slots changes only when the set of parameters with gradients does)."""
    return torch.tensor(
        [k * num_slots + s for k in range(num_lists) for s in slots], dtype=torch.long, device=device
    )
