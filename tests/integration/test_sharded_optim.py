"""FSDP2- and FSDP1-sharded LARS and LAMB take the same steps as on the unsharded model (2 processes, gloo, CPU).

The sharded model gets half the batch per rank; FSDP2 averages gradients over ranks, so its gradients equal
the full-batch gradients of the unsharded reference. Layer sizes are odd so shards are uneven and one rank
holds nothing of some tensors: per-shard norms would give different trust ratios, whole-tensor norms the same.
The models are float64 so that the comparison measures the sharding logic, not fp32 rounding of the two
gradient reductions (which the trust ratio amplifies at these large learning rates: ~1e-5 in fp32).
All cases run in one pair of processes: spawning costs more than the steps.
"""

from __future__ import annotations

import copy
import functools
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import free_port
from torch import nn

from lightning_lars.core.errors import UserError
from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.op_count import count_ops
from lightning_lars.optim.param_groups import FSDP1_PREFIX, param_groups

WORLD = 2
STEPS = 4
CASES = {
    "lars_nvidia": (LARS, {"momentum": 0.9, "form": "nvidia", "trust_coefficient": 0.02, "eps": 1e-9}),
    "lars_mlperf_nesterov": (
        LARS,
        {"momentum": 0.9, "form": "mlperf", "nesterov": True, "trust_coefficient": 0.02},
    ),
    "lars_clip": (LARS, {"momentum": 0.9, "form": "nvidia", "clip": True, "trust_coefficient": 0.02}),
    "lamb": (LAMB, {"max_grad_norm": 0.5}),
}


def _model() -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(5, 7), nn.LayerNorm(7), nn.ReLU(), nn.Linear(7, 3), nn.ReLU(), nn.Linear(3, 1)]
    return nn.Sequential(*layers).double()


def _lr(step: int) -> float:
    return 0.5 * (step + 1)  # changing lr: the momentum forms differ only then


def _run_case(rank: int, case: str) -> tuple[float, float, float]:
    """FSDP2: ``fully_shard`` every layer, then the optimizer over the DTensor parameters."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    cls, kwargs = CASES[case]
    reference = _model()
    sharded = copy.deepcopy(reference)
    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in sharded:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    opt = cls(param_groups(sharded, weight_decay=0.01), **kwargs)
    reductions = _train_side_by_side(rank, case, reference, sharded, opt)
    full = {n: p.full_tensor() for n, p in sharded.named_parameters()}
    return _compare(full, reference), reductions


def _fsdp1_case(rank: int, case: str) -> tuple[tuple[float, float], float]:
    """Raw FSDP1 on CPU (``device_id=cpu``, ``use_orig_params=True``) in Lightning's order: wrap first, then
    build the param groups from the wrapped model, then the optimizer with ``shard_group`` (what
    ``FSDP1Strategy`` sets). The leftover root unit holds Linear(3, 1): rank 0 holds none of its bias, so FSDP1
    leaves that gradient None there while rank 1 has it."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

    cls, kwargs = CASES[case]
    reference = _model()
    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=8)
    sharded = FullyShardedDataParallel(
        copy.deepcopy(reference), device_id=torch.device("cpu"), use_orig_params=True, auto_wrap_policy=policy
    )
    groups = param_groups(sharded, weight_decay=0.01)
    expected = param_groups(reference, weight_decay=0.01)
    assert [g["param_names"] for g in groups] == [g["param_names"] for g in expected], "rule read flat shapes"
    unsharded = cls(groups, **kwargs)  # what Lightning's own FSDPStrategy would hand over: no shard group
    sharded(torch.zeros(2, 5, dtype=torch.float64)).sum().backward()
    with pytest.raises(UserError, match="strategy=fsdp1"):
        unsharded.step()  # refused, not silently per-shard norms
    opt = cls(groups, shard_group=dist.group.WORLD, **kwargs)
    reductions = _train_side_by_side(rank, case, reference, sharded, opt)
    with FullyShardedDataParallel.summon_full_params(sharded, writeback=False):
        full = {n.replace(FSDP1_PREFIX, ""): p.detach().clone() for n, p in sharded.named_parameters()}
    return _compare(full, reference), reductions


def _train_side_by_side(rank: int, case: str, reference: nn.Module, sharded: nn.Module, opt) -> float:
    """STEPS steps: the reference on the whole batch, ``sharded`` on this rank's half; returns the optimizer's
    all-reduces per step."""
    cls, kwargs = CASES[case]
    opt_ref = cls(param_groups(reference, weight_decay=0.01), **kwargs)
    reductions = 0
    generator = torch.Generator().manual_seed(1)
    for step in range(STEPS):
        x = torch.randn(8, 5, generator=generator, dtype=torch.float64)
        y = torch.randn(8, 1, generator=generator, dtype=torch.float64)
        for o in (opt_ref, opt):
            for group in o.param_groups:
                group["lr"] = _lr(step)
        opt_ref.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        opt_ref.step()
        half = slice(rank * 4, rank * 4 + 4)
        opt.zero_grad()
        nn.functional.mse_loss(sharded(x[half]), y[half]).backward()
        reductions += _all_reduces_in(opt.step)
    return reductions / STEPS


def _compare(full: dict, reference: nn.Module) -> tuple[float, float]:
    """(max error of the sharded weights, max distance the reference moved)."""
    initial = dict(_model().named_parameters())
    error = max((full[n] - p).abs().max().item() for n, p in reference.named_parameters())
    moved = max((p - initial[n]).abs().max().item() for n, p in reference.named_parameters())
    return error, moved


def _all_reduces_in(fn) -> int:
    """Number of ``dist.all_reduce`` calls while ``fn()`` runs (the optimizer's collectives only)."""
    calls = []
    original = dist.all_reduce

    def counting_all_reduce(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    dist.all_reduce = counting_all_reduce
    try:
        fn()
    finally:
        dist.all_reduce = original
    return len(calls)


def _sharded_step_ops(num_layers: int) -> int:
    """Top-level aten ops of one LARS step on an FSDP2-sharded stack of ``num_layers`` Linear+LayerNorm."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(5, 5), nn.LayerNorm(5)) for _ in range(num_layers)])
    fully_shard(model, mesh=init_device_mesh("cpu", (WORLD,)))
    opt = LARS(param_groups(model, 1e-4), momentum=0.9)
    model(torch.randn(4, 5)).sum().backward()
    opt.step()  # the first step creates state
    return count_ops(opt.step)


def _worker(rank: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        results = {f"fsdp2 {case}": _run_case(rank, case) for case in CASES}
        results.update({f"fsdp1 {case}": _fsdp1_case(rank, case) for case in CASES})
        results["ops"] = (_sharded_step_ops(2), _sharded_step_ops(12))
        queue.put((rank, results))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_sharded_steps_match_unsharded():
    queue = mp.get_context("spawn").Queue()
    mp.start_processes(_worker, args=(free_port(), queue), nprocs=WORLD, start_method="spawn")
    results = dict(queue.get(timeout=30) for _ in range(WORLD))
    for rank, cases in sorted(results.items()):
        few, many = cases.pop("ops")
        assert few == many, f"rank {rank}: a sharded step dispatches {few} ops for 2 layers, {many} for 12"
        for case, ((error, moved), reductions_per_step) in cases.items():
            assert moved > 1e-3, f"{case}: the weights did not move; the comparison would be empty"
            assert error < 1e-6, f"{case}, rank {rank}: sharded weights differ from unsharded by {error:.3g}"
            # LAMB needs ||u|| after ||g|| (u depends on the clipped g): two collectives; LARS one.
            assert reductions_per_step == (2 if case.endswith("lamb") else 1), case
