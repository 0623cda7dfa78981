"""FSDP2-sharded LARS and LAMB take the same steps as on the unsharded model (2 processes, gloo, CPU).

The sharded model gets half the batch per rank; FSDP2 averages gradients over ranks, so its gradients equal
the full-batch gradients of the unsharded reference. Layer sizes are odd so shards are uneven and one rank
holds nothing of some tensors: per-shard norms would give different trust ratios, whole-tensor norms the same.
The models are float64 so that the comparison measures the sharding logic, not fp32 rounding of the two
gradient reductions (which the trust ratio amplifies at these large learning rates: ~1e-5 in fp32).
All cases run in one pair of processes: spawning costs more than the steps.
"""

from __future__ import annotations

import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.op_count import count_ops
from lightning_lars.optim.param_groups import param_groups

WORLD = 2
STEPS = 4
CASES = {
    "lars_nvidia": (LARS, {"momentum": 0.9, "form": "nvidia", "trust_coefficient": 0.02, "eps": 1e-9}),
    "lars_mlperf_nesterov": (LARS, {"momentum": 0.9, "form": "mlperf", "nesterov": True,
                                    "trust_coefficient": 0.02}),
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
    opt_ref = cls(param_groups(reference, weight_decay=0.01), **kwargs)
    opt = cls(param_groups(sharded, weight_decay=0.01), **kwargs)
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
    full = [p.full_tensor() for p in sharded.parameters()]
    error = max((a - b).abs().max().item() for a, b in zip(full, reference.parameters()))
    moved = max((a - b).abs().max().item() for a, b in zip(reference.parameters(), _model().parameters()))
    return error, moved, reductions / STEPS


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


def _flat_shard_case(rank: int) -> tuple[float, float, float]:
    """FSDP1 ``use_orig_params=True`` layout (FSDP1 refuses the CPU, so built by hand): every parameter is
    flattened and each rank holds a contiguous slice (rank 1 holds nothing of 1-element tensors); groups come
    from the unwrapped model; ``shard_group`` makes the norms whole."""
    reference = _model()
    groups = param_groups(reference, weight_decay=0.01)
    pieces = {}
    for p in reference.parameters():
        per_rank = -(-p.numel() // WORLD)  # ceil
        pieces[p] = slice(rank * per_rank, (rank + 1) * per_rank)
    shards = {p: nn.Parameter(p.detach().flatten()[pieces[p]].clone()) for p in reference.parameters()}
    shard_groups = [{**g, "params": [shards[p] for p in g["params"]]} for g in groups]
    kwargs = {"momentum": 0.9, "form": "mlperf", "trust_coefficient": 0.02}
    opt_ref = LARS(groups, **kwargs)
    opt = LARS(shard_groups, shard_group=dist.group.WORLD, **kwargs)
    generator = torch.Generator().manual_seed(2)
    reductions = 0
    for step in range(STEPS):
        for p in reference.parameters():
            p.grad = torch.randn(p.shape, generator=generator, dtype=torch.float64)
            shards[p].grad = p.grad.flatten()[pieces[p]].clone()
        for o in (opt_ref, opt):
            for group in o.param_groups:
                group["lr"] = _lr(step)
        opt_ref.step()
        reductions += _all_reduces_in(opt.step)
    error = 0.0
    for p, shard in shards.items():
        gathered = [torch.empty(-(-p.numel() // WORLD), dtype=p.dtype) for _ in range(WORLD)]
        padded = torch.cat([shard.detach(), shard.new_zeros(gathered[0].numel() - shard.numel())])
        dist.all_gather(gathered, padded)
        whole = torch.cat(gathered)[: p.numel()].view_as(p)
        error = max(error, (whole - p.detach()).abs().max().item())
    moved = max((a - b).abs().max().item() for a, b in zip(reference.parameters(), _model().parameters()))
    return error, moved, reductions / STEPS


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
        results = {case: _run_case(rank, case) for case in CASES}
        results["lars_fsdp1_flat_shards"] = _flat_shard_case(rank)
        results["ops"] = (_sharded_step_ops(2), _sharded_step_ops(12))
        queue.put((rank, results))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_fsdp2_sharded_steps_match_unsharded():
    queue = mp.get_context("spawn").Queue()
    mp.start_processes(_worker, args=(_free_port(), queue), nprocs=WORLD, start_method="spawn")
    results = dict(queue.get(timeout=30) for _ in range(WORLD))
    for rank, cases in sorted(results.items()):
        few, many = cases.pop("ops")
        assert few == many, f"rank {rank}: a sharded step dispatches {few} ops for 2 layers, {many} for 12"
        for case, (error, moved, reductions_per_step) in cases.items():
            assert moved > 1e-3, f"{case}: the weights did not move; the comparison would be empty"
            assert error < 1e-6, f"{case}, rank {rank}: sharded weights differ from unsharded by {error:.3g}"
            # LAMB needs ||u|| after ||g|| (u depends on the clipped g): two collectives; LARS one.
            assert reductions_per_step == (2 if case == "lamb" else 1), case
