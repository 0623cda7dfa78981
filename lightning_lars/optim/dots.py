"""Inner products of whole parameter vectors, in a few multi-tensor ops, exact under sharding.

NLCG treats all parameters as one vector (the authors concatenate every variable, ``altopt_tf.py``
``alt_dir_and_vars``), so it needs ``<x, y>`` summed over every element of every tensor. Each rank sums
the elementwise products of its local shards; sharded tensors' partial sums are then added over their shard
groups with one ``all_reduce`` per set of groups (as `norms.global_norms` does for norms), replicated and
unsharded tensors are summed locally. Dispatched ops do not grow with the number of tensors.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from lightning_lars.optim.norms import _shard_groups


def signed_sums(products: list[Tensor]) -> Tensor:
    """Per-tensor sums of ``products`` as one vector, in 3 foreach ops: ``sum = |x|_1 - 2 |min(x, 0)|_1``.

    torch has no ``_foreach_sum``; the L1 norm of the negative part restores the sign."""
    negative = torch._foreach_clamp_max(products, 0.0)
    return torch.stack(torch._foreach_norm(products, 1)) - 2.0 * torch.stack(torch._foreach_norm(negative, 1))


def global_dots(
    pairs: list[tuple[list[Tensor], list[Tensor]]],
    params: list[Tensor],
    shard_group: dist.ProcessGroup | None = None,
) -> Tensor:
    """``<xs, ys>`` over all tensors, one value per pair, identical on every rank.

    Args:
        pairs: ``(xs, ys)`` lists of local tensors (shards), each aligned with ``params``.
        params: the parameters (possibly DTensors) that say how each entry is sharded.
        shard_group: FSDP1 ``use_orig_params=True``: the group plain-tensor shards are spread over.

    Returns:
        A 1-D tensor of ``len(pairs)`` inner products.
    """
    # shape [pairs, tensors]
    per_tensor = torch.stack([signed_sums(torch._foreach_mul(xs, ys)) for xs, ys in pairs])
    plan: dict[tuple, list[int]] = {}
    local = []
    for i, p in enumerate(params):
        groups = _shard_groups(p, shard_group)
        if groups:
            plan.setdefault(groups, []).append(i)
        else:
            local.append(i)
    if not plan:
        return per_tensor.sum(1)
    total = per_tensor[:, local].sum(1) if local else per_tensor.new_zeros(len(pairs))
    for groups, idx in plan.items():  # same order on every rank: params come in group order
        # the usual FSDP2 case, every tensor on one mesh: no index tensor (a host-to-device copy per step)
        part = per_tensor.sum(1) if len(idx) == len(params) else per_tensor[:, idx].sum(1)
        for group in groups:
            dist.all_reduce(part, op=dist.ReduceOp.SUM, group=group)
        total = total + part
    return total
