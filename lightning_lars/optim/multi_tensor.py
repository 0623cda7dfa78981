"""What LARS and LAMB share: gathering a group's tensors as lists for ``torch._foreach_*`` ops, fp32 master
weights and state for bf16/fp16 parameters, and the per-layer statistics a monitor callback reads.

Parameters that are DTensors (FSDP2) are handled through their local shards: elementwise math on shards is
the math on the whole tensor, and only norms need communication (``norms.global_norms``). Optimizer state is
created like the parameter (``zeros_like`` of a DTensor is a DTensor), so distributed checkpointing sees the
same placements as for ``torch.optim`` optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import chain

import torch
from torch import Tensor
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer

from lightning_lars.core.errors import UserError
from lightning_lars.optim.flat import FlatScratch
from lightning_lars.optim.norms import LOW_PRECISION, local
from lightning_lars.optim.param_groups import shape

MASTER = "master_weight"  # fp32 copy of a bf16/fp16 parameter; the optimizer updates this, then rounds once


@dataclass
class GroupTensors:
    """A param group's tensors that have a gradient, as aligned lists of local shards."""

    params: list[Tensor]  # the parameters (possibly DTensors), in group order
    names: list[str]  # labels for per-layer statistics
    weights: list[Tensor]  # what the update writes: fp32 master shards for bf16/fp16, else the param shards
    grads: list[Tensor]  # gradient shards, fp32 copies for bf16/fp16; read only, never written
    state: dict[str, list[Tensor]] = field(default_factory=dict)  # per-param state shards, fp32 or fp64
    # (low-precision param shards, their masters); a factory: a `([], [])` default would be ONE pair of lists
    # shared by every instance, growing each step with every optimizer's tensors
    rounded: tuple[list[Tensor], list[Tensor]] = field(default_factory=lambda: ([], []))


@dataclass
class _Collected:
    """One group's lists as `collect` last built them, kept for the next step: only the gradients change between
    steps (new tensors after ``zero_grad(set_to_none=True)``), so only they are gathered again."""

    tensors: GroupTensors
    keys: tuple[str, ...]  # the state the group kept
    # ``opt.state[p]`` of each parameter: load_state_dict and Lightning's move to the device put new dicts
    # there, which the next step must see
    states: list[dict]
    sharded: bool  # a DTensor gradient: its local shard is read
    low: list[int]  # positions of bf16/fp16 parameters, whose gradients are copied into fp32 scratch
    scratch: list[Tensor]

    def still_holds(self, opt: Optimizer, chosen: list[Tensor], keys: tuple[str, ...]) -> bool:
        params = self.tensors.params
        return (
            keys == self.keys
            and len(chosen) == len(params)
            and all(p is q for p, q in zip(chosen, params))
            and all(opt.state[p] is s for p, s in zip(chosen, self.states))
        )

    def with_new_grads(self, chosen: list[Tensor]) -> GroupTensors:
        grads = [local(p.grad) for p in chosen] if self.sharded else [p.grad for p in chosen]
        if self.low:
            torch._foreach_copy_(self.scratch, [grads[i] for i in self.low])
            for i, fp32 in zip(self.low, self.scratch):
                grads[i] = fp32
        return replace(self.tensors, grads=grads)


def collect(
    opt: Optimizer, group: dict, group_index: int, state_keys: tuple[str, ...]
) -> GroupTensors | None:
    """Gather ``group``'s parameters with a gradient; create missing state (zeros) on first use.

    The first step, and any step after the set of parameters with a gradient or their state dicts changed,
    walks the parameters one by one (state, masters, scratch); the others reuse those lists and gather only the
    gradients: 4-13 % less host time per LARS step on ResNet-50's 161 tensors (``bench_optim.py --host``), and
    host time is what these optimizers' steps on an H200 were bound by (BENCHMARKS.md). bf16/fp16 gradients
    are copied into persistent fp32 scratch tensors (one op), so all math runs in fp32.
    """
    chosen = [p for p in group["params"] if p.grad is not None]
    if not chosen:
        return None
    kept = opt.__dict__.setdefault("_collected", {})  # group index -> _Collected; not saved
    if group_index in kept and kept[group_index].still_holds(opt, chosen, state_keys):
        return kept[group_index].with_new_grads(chosen)
    names = group.get("param_names") or [f"group{group_index}.{i}" for i in range(len(group["params"]))]
    named = dict(zip(map(id, group["params"]), names))
    out = GroupTensors(chosen, [named[id(p)] for p in chosen], [], [], {k: [] for k in state_keys})
    low_grads, scratch, low, states = [], [], [], []
    fp32_grads = opt.__dict__.setdefault("_fp32_grads", {})  # param -> fp32 gradient scratch, not saved
    for i, p in enumerate(chosen):
        if p.grad.is_sparse:
            raise RuntimeError(f"{type(opt).__name__} does not support sparse gradients")
        state = opt.state[p]
        states.append(state)
        is_low = p.dtype in LOW_PRECISION
        if not state:
            if is_low:
                state[MASTER] = p.detach().to(torch.float32)
            for key in state_keys:
                state[key] = torch.zeros_like(p, dtype=torch.float32 if is_low else p.dtype)
        if is_low:
            if p not in fp32_grads:
                fp32_grads[p] = torch.empty_like(local(p.grad), dtype=torch.float32)
            low_grads.append(local(p.grad))
            scratch.append(fp32_grads[p])
            low.append(i)
        out.grads.append(fp32_grads[p] if is_low else local(p.grad))
        out.weights.append(local(state[MASTER]) if is_low else local(p))
        for key in state_keys:
            out.state[key].append(local(state[key]))
        if is_low:
            out.rounded[0].append(local(p))
            out.rounded[1].append(local(state[MASTER]))
    if low_grads:
        torch._foreach_copy_(scratch, low_grads)
    sharded = any(isinstance(p.grad, DTensor) for p in chosen)
    kept[group_index] = _Collected(out, tuple(state_keys), states, sharded, low, scratch)
    return out


def collect_groups(opt: Optimizer, state_keys) -> list[tuple[dict, GroupTensors]]:
    """`collect` for every param group that has gradients: ``[(group, tensors), ...]`` in group order.

    ``state_keys(group)`` names the per-parameter state the optimizer keeps for that group."""
    work = []
    for index, group in enumerate(opt.param_groups):
        tensors = collect(opt, group, index, state_keys(group))
        if tensors is not None:
            work.append((group, tensors))
    return work


def sharded_order(opt: Optimizer, select) -> list[Tensor] | None:
    """Under FSDP1 (``opt.shard_group`` set): every parameter of the groups ``select(group)`` keeps, with or
    without a gradient on this rank, in group order: the same list on every rank, for `norms.global_norms`.
    None otherwise (DDP: no collective; FSDP2: DTensors have a gradient on every rank or on none)."""
    if getattr(opt, "shard_group", None) is None:
        if not opt.__dict__.setdefault("_checked_not_sharded", False):  # once: a per-step scan costs
            opt._checked_not_sharded = True
            if any(shape(p) != p.shape for group in opt.param_groups for p in group["params"]):
                raise UserError(
                    f"{type(opt).__name__}'s parameters are FSDP1 shards but it has no shard_group, so"
                    " its norms would be per shard: use strategy=fsdp1 (Lightning's FSDPStrategy"
                    " does not set it)"
                )
        return None
    return [p for group in opt.param_groups if select(group) for p in group["params"]]


def write_back(tensors: GroupTensors) -> None:
    """Round updated fp32 master weights into their bf16/fp16 parameters (one op for the whole group)."""
    if tensors.rounded[0]:
        torch._foreach_copy_(tensors.rounded[0], tensors.rounded[1])


def add_scaled_(
    ys: list[Tensor], scale: Tensor | float, xs: list[Tensor], spread: FlatScratch | None = None
) -> None:
    """``ys[i] += scale[i] * xs[i]`` for a vector ``scale`` (one value per tensor), or ``ys[i] += scale * xs[i]``
    for a 0-d tensor or a Python float.

    A float is foreach's ``alpha`` (nothing is written for 0); a 0-d tensor (a factor that stays on the device,
    e.g. AMP's skip) is one fast-path multiply and one add. A vector goes through ``_foreach_addcmul_``, which
    stays on the device (no ``.item()`` sync): with ``spread`` (a scratch laid out like ``xs``) it is spread
    over the elements first, so the op takes CUDA's multi-tensor fast path (two kernels whatever the number of
    tensors); without it, as 0-d tensors, one kernel per tensor on CUDA.
    """
    if isinstance(scale, Tensor) and scale.ndim == 0:
        torch._foreach_add_(ys, torch._foreach_mul(xs, scale))
    elif isinstance(scale, Tensor):
        torch._foreach_addcmul_(ys, spread.spread(scale) if spread is not None else scale.unbind(0), xs)
    elif scale != 0:
        torch._foreach_add_(ys, xs, alpha=scale)


def restore_fp32_state(opt: Optimizer, state_dict: dict) -> None:
    """Undo ``Optimizer.load_state_dict``'s cast of state to the parameter dtype for bf16/fp16 parameters.

    torch casts every floating state tensor to ``param.dtype``; fp32 masters and buffers of bf16 parameters
    would lose their precision, so they are re-read from ``state_dict`` in fp32.
    """
    saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
    params = chain.from_iterable(g["params"] for g in opt.param_groups)
    for saved_id, p in zip(saved_ids, params):
        if p.dtype not in LOW_PRECISION or saved_id not in state_dict["state"]:
            continue
        for key, value in state_dict["state"][saved_id].items():
            if isinstance(value, Tensor) and value.is_floating_point():
                opt.state[p][key] = value.to(device=p.device, dtype=torch.float32)


def stats(names: list[str], w_norm: Tensor, g_norm: Tensor, ratio: Tensor) -> dict:
    """Per-layer statistics as one dict of fp32 vectors (no per-tensor ``.item()``); see ``LARS``."""
    return {
        "names": names,
        "w_norm": w_norm.detach().float(),
        "g_norm": g_norm.detach().float(),
        "trust_ratio": ratio.detach().float(),
    }
