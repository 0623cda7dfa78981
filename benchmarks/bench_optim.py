"""Optimizer step cost on real parameter sets: our LARS/LAMB vs timm's and torch's SGD, in one run.

For each model's parameters (random gradients, no data) and each optimizer it prints ms/step (median) and the
number of top-level aten ops one step dispatches (``lightning_lars.optim.op_count``): on a GPU each is about
one kernel launch, so the op count is the CPU proxy for GPU step time (CPU ms/step misleads for foreach code,
which falls back to per-tensor loops on the CPU). The last column is ops relative to our LARS.

    python benchmarks/bench_optim.py                  # CPU: ResNet-50 timed, ResNet-18 op counts (~1 min)
    python benchmarks/bench_optim.py --with-lamb      # also our LAMB vs timm's Lamb (slow on CPU)
    python benchmarks/bench_optim.py --device cuda    # GPU: adds torch.optim.SGD(fused=True)

Then weight-update sharding (``strategy.optimizer_sharding``): on ``--shard-world`` gloo processes, one LARS
step of the unsharded optimizer vs ``ShardedUpdate`` (own tensors + the weights' all-gather), and the
optimizer state each rank holds. ``--shard-world 0`` skips it.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start/stop lines are noise here

import timm
import torch
from timm.optim import Lamb as TimmLamb
from timm.optim import Lars as TimmLars

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.op_count import count_ops
from lightning_lars.optim.param_groups import param_groups
from lightning_lars.parallel.sharded_update import ShardedUpdate

WEIGHT_DECAY = 5e-5  # NVIDIA MLPerf ResNet-50 value; on adapted tensors only


def optimizers(device: str, with_lamb: bool) -> dict:
    """name -> factory(model) for every optimizer compared; same groups (BN and bias excluded) for all."""
    groups = lambda m: param_groups(m, WEIGHT_DECAY)
    table = {
        "ours LARS (mlperf form)": lambda m: LARS(groups(m), lr=1.0, momentum=0.9, form="mlperf"),
        "ours LARS (nvidia, nesterov, clip)": lambda m: LARS(groups(m), lr=1.0, nesterov=True, clip=True),
        "timm Lars (default)": lambda m: TimmLars(groups(m), lr=1.0, momentum=0.9),
        "timm Lars (foreach=True)": lambda m: TimmLars(groups(m), lr=1.0, momentum=0.9, foreach=True),
        "torch SGD (default)": lambda m: torch.optim.SGD(groups(m), lr=1.0, momentum=0.9),
        "torch SGD (foreach=True)": lambda m: torch.optim.SGD(groups(m), lr=1.0, momentum=0.9, foreach=True),
    }
    if with_lamb:
        table["ours LAMB"] = lambda m: LAMB(groups(m), lr=1e-3)
        table["timm Lamb (default)"] = lambda m: TimmLamb(groups(m), lr=1e-3)
    if device == "cuda":
        table["torch SGD (fused=True)"] = lambda m: torch.optim.SGD(
            groups(m), lr=1.0, momentum=0.9, fused=True
        )
    return table


def measure(model: torch.nn.Module, make, steps: int, device: str) -> tuple[float | None, int]:
    """(median ms per step or None if steps == 0, top-level aten ops per step) after a warm-up step that
    creates the state."""
    optimizer = make(model)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    optimizer.step()
    times = []
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        optimizer.step()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return (statistics.median(times) if times else None), count_ops(optimizer.step)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--timed", default="resnet50", help="timm architectures timed, comma-separated")
    parser.add_argument(
        "--counted",
        default="resnet18",
        help="further architectures whose op counts only are measured (tensor-count scaling)",
    )
    parser.add_argument("--steps", type=int, default=3, help="timed steps per optimizer (median reported)")
    parser.add_argument("--with-lamb", action="store_true", help="also compare LAMB implementations")
    parser.add_argument(
        "--shard-world", type=int, default=2, help="processes for the sharding table (0: skip)"
    )
    parser.add_argument("--shard-arch", default="resnet50")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, timm {timm.__version__}, device {args.device}, "
        f"threads {torch.get_num_threads()}"
    )
    print("| model | tensors | params (M) | optimizer | ms/step | aten ops/step | ops / ours LARS |")
    print("|---|---|---|---|---|---|---|")
    archs = [(a, args.steps) for a in args.timed.split(",") if a]
    archs += [(a, 0) for a in args.counted.split(",") if a]
    for arch, steps in archs:
        model = timm.create_model(arch, pretrained=False).to(args.device)
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-2
        tensors = sum(1 for _ in model.parameters())
        numel = sum(p.numel() for p in model.parameters()) / 1e6
        reference_ops = None
        for name, make in optimizers(args.device, args.with_lamb).items():
            snapshot = [p.detach().clone() for p in model.parameters()]  # every optimizer starts alike
            ms, ops = measure(model, make, steps, args.device)
            with torch.no_grad():
                for p, s in zip(model.parameters(), snapshot):
                    p.copy_(s)
            reference_ops = reference_ops or ops
            timing = "-" if ms is None else f"{ms:.1f}"
            ratio = ops / reference_ops
            row = f"| {arch} | {tensors} | {numel:.1f} | {name} | {timing} | {ops} | {ratio:.2f} |"
            print(row, flush=True)

    if args.shard_world:
        sharding_table(args.shard_arch, args.shard_world, max(args.steps, 1), args.with_lamb)


def sharded_steps(
    rank: int, world_size: int, port: int, arch: str, steps: int, with_lamb: bool, results
) -> None:
    """Per optimizer: median step ms, unsharded and sharded, and state bytes on this rank (rank 0 reports)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.set_num_threads(1)
    makers = {"LARS (mlperf form)": lambda groups: LARS(groups, lr=1.0, momentum=0.9, form="mlperf")}
    if with_lamb:
        makers["LAMB"] = lambda groups: LAMB(groups, lr=1e-3)
    for name, make in makers.items():
        for sharded in (False, True):
            torch.manual_seed(0)  # same weights and gradients on every rank, as after DDP's all-reduce
            model = timm.create_model(arch, pretrained=False)
            for p in model.parameters():
                p.grad = torch.randn_like(p) * 1e-2
            optimizer = make(param_groups(model, WEIGHT_DECAY))
            optimizer = ShardedUpdate(optimizer) if sharded else optimizer
            times = []
            for _ in range(steps + 1):  # the first step creates the state
                dist.barrier()
                start = time.perf_counter()
                optimizer.step()
                times.append((time.perf_counter() - start) * 1e3)
            state = sum(
                t.numel() * t.element_size()
                for s in optimizer.state.values()
                for t in s.values()
                if isinstance(t, torch.Tensor)
            )
            if rank == 0:
                results[(name, sharded)] = (statistics.median(times[1:]), state)
    dist.destroy_process_group()


def sharding_table(arch: str, world_size: int, steps: int, with_lamb: bool) -> None:
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(sharded_steps, args=(world_size, port, arch, steps, with_lamb, results), nprocs=world_size)
        results = dict(results)
    print(f"\nWeight-update sharding, {arch}, {world_size} gloo processes (1 thread each), rank 0:")
    print("| optimizer | sharded | ms/step (median) | state MiB on rank 0 | state vs unsharded |")
    print("|---|---|---|---|---|")
    for (name, sharded), (ms, state) in sorted(results.items()):
        full = results[(name, False)][1]
        print(
            f"| {name} | {'yes' if sharded else 'no'} | {ms:.1f} | {state / 2**20:.1f} | {state / full:.2f} |"
        )


if __name__ == "__main__":
    main()
