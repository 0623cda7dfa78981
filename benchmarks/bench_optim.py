"""Optimizer step cost on ResNet-50's parameters: our LARS and LAMB (eager and compiled) vs torch's fastest, one run.

Each of ours is compared with torch's fastest implementation of its plain counterpart on this device, all three
measured here: ``SGD(momentum=0.9)`` for LARS and ``AdamW`` for LAMB, each as the per-tensor loop
(``foreach=False``), ``foreach=True`` and ``fused=True``. Steps of all optimizers are interleaved round by round
(a shared machine's load then hits every row alike); the table gives the median ms/step, the first step's
seconds (state creation, plus ``torch.compile`` for the compiled rows), top-level aten ops per step
(``optim.op_count``), the CUDA kernels those ops launch by CUDA's foreach rule (``op_count.count_launches``:
one per tensor for a foreach op off the multi-tensor fast path; counted on any device) and, on a GPU, kernel
launches per step counted by ``torch.profiler``, beside the floor of bytes a step must move per fp32
parameter. The last column is ms relative to torch's fastest counterpart.

    python benchmarks/bench_optim.py                       # CPU (GPU rows: one skip line)
    python benchmarks/bench_optim.py --device cuda         # GPU
    python benchmarks/bench_optim.py --shard-world 2       # also weight-update sharding on 2 gloo processes
    python benchmarks/bench_optim.py --host                # 1-element tensors: the host's part of a step
    python benchmarks/bench_optim.py --counts              # ops and modelled launches only (no compile, no timing)
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
from torch.profiler import ProfilerActivity, profile

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.op_count import count_launches, count_ops
from lightning_lars.optim.param_groups import param_groups
from lightning_lars.parallel.sharded_update import ShardedUpdate

WEIGHT_DECAY = 5e-5  # NVIDIA MLPerf ResNet-50 value; on adapted tensors only
# Bytes a step must read + write per fp32 parameter (weights, gradient read, each state read + written).
FLOOR = {"SGD": 20, "LARS": 28, "AdamW": 28, "LAMB": 40}  # LARS/LAMB: + a norm pass over w and g


def optimizers(compiled: bool = True) -> dict[str, tuple[str, object]]:
    """name -> (family, factory(groups)); the family names the counterpart and the bytes floor."""
    sgd = {"family": "SGD", "lr": 1.0, "momentum": 0.9}
    adamw = {"family": "AdamW", "lr": 1e-3}
    table = {}
    for impl in ("compiled", "eager") if compiled else ("eager",):
        table[f"ours LARS mlperf ({impl})"] = (
            "LARS",
            lambda g, i=impl: LARS(g, lr=1.0, form="mlperf", implementation=i),
        )
        table[f"ours LAMB ({impl})"] = ("LAMB", lambda g, i=impl: LAMB(g, lr=1e-3, implementation=i))
    for options in (sgd, adamw):
        family, kwargs = options["family"], {k: v for k, v in options.items() if k != "family"}
        cls = torch.optim.SGD if family == "SGD" else torch.optim.AdamW
        for flag in ("foreach=False", "foreach=True", "fused=True"):
            key, value = flag.split("=")
            table[f"torch {family} ({flag})"] = (
                family,
                lambda g, c=cls, kw=kwargs, k=key, v=value == "True": c(g, **kw, **{k: v}),
            )
    return table


def kernels_per_step(step) -> int:
    """CUDA kernels one ``step()`` launches, counted by torch.profiler."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def run(arch: str, device: str, rounds: int, host: bool = False, compiled: bool = True) -> list[dict]:
    model = timm.create_model(arch, pretrained=False).to(device)
    if host:  # the same tensors, one element each: the step's host work (Python, dispatch) is what is left
        for module in model.modules():
            for name, p in list(module._parameters.items()):
                if p is not None:
                    module._parameters[name] = torch.nn.Parameter(p.new_ones([1] * p.ndim))
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    for name, (family, make) in optimizers(compiled).items():
        try:
            optimizer = make(param_groups(model, WEIGHT_DECAY))
        except (RuntimeError, TypeError, ValueError) as error:  # e.g. fused=True without a kernel here
            print(f"skip {name}: {str(error).splitlines()[0]}", flush=True)
            continue
        sync()
        start = time.perf_counter()
        optimizer.step()  # creates the state (and compiles)
        sync()
        rows.append({"name": name, "family": family, "opt": optimizer, "first": time.perf_counter() - start})
        rows[-1]["times"] = []
    for _ in range(rounds):  # interleaved: load on a shared machine hits every row alike
        for row in rows:
            sync()
            start = time.perf_counter()
            row["opt"].step()
            sync()
            row["times"].append((time.perf_counter() - start) * 1e3)
    for row in rows:
        row["ms"] = statistics.median(row["times"]) if row["times"] else float("nan")
        row["ops"] = count_ops(row["opt"].step)
        row["launches"] = count_launches(row["opt"].step)
        row["kernels"] = kernels_per_step(row["opt"].step) if device == "cuda" else None
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--arch", default="resnet50", help="timm architecture whose parameters are stepped")
    parser.add_argument("--rounds", type=int, default=7, help="timed steps per optimizer (median reported)")
    parser.add_argument(
        "--host",
        action="store_true",
        help="every tensor one element: the host's time per step, which bounded the GPU's (BENCHMARKS.md)",
    )
    parser.add_argument(
        "--counts",
        action="store_true",
        help="ops and modelled CUDA launches per step only: eager rows, no timing (compiling costs minutes here)",
    )
    parser.add_argument(
        "--shard-world", type=int, default=0, help="processes for the sharding table (0: skip)"
    )
    args = parser.parse_args()
    if args.counts:
        args.rounds = 0
        print("skip: compiled rows and timing (--counts)")
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, timm {timm.__version__}, device {args.device}, "
        f"threads {torch.get_num_threads()}, arch {args.arch}{', 1-element tensors' if args.host else ''}"
    )
    if args.device == "cpu":
        print("skip: GPU rows (kernel launches, fused CUDA kernels) need --device cuda on a GPU")
    rows = run(args.arch, args.device, args.rounds, args.host, compiled=not args.counts)
    fastest = {}
    for family in ("SGD", "AdamW"):
        torch_rows = [r for r in rows if r["family"] == family]
        fused = [r for r in torch_rows if "fused" in r["name"]]
        fastest[family] = fused[0] if args.counts and fused else min(torch_rows, key=lambda r: r["ms"])
    counterpart = {"LARS": "SGD", "LAMB": "AdamW", "SGD": "SGD", "AdamW": "AdamW"}
    print(
        "| optimizer | ms/step | first step s (compile) | aten ops/step | CUDA launches/step (foreach rule) |"
        " kernels/step (profiler) | floor B/param | ms vs torch's fastest |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        best = fastest[counterpart[row["family"]]]
        kernels = "-" if row["kernels"] is None else str(row["kernels"])
        ratio = "-" if args.counts else f"{row['ms'] / best['ms']:.2f}x {best['name']}"
        ms = "-" if args.counts else f"{row['ms']:.1f}"
        print(
            f"| {row['name']} | {ms} | {row['first']:.1f} | {row['ops']} | {row['launches']} |"
            f" {kernels} | {FLOOR[row['family']]} | {ratio} |",
            flush=True,
        )
    if args.shard_world:
        sharding_table(args.arch, args.shard_world, max(args.rounds, 1))


def sharded_steps(rank: int, world_size: int, port: int, arch: str, steps: int, results) -> None:
    """Median step ms, unsharded and sharded, and state bytes on this rank (rank 0 reports)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.set_num_threads(1)
    name = "LARS (mlperf form)"
    for sharded in (False, True):
        torch.manual_seed(0)  # same weights and gradients on every rank, as after DDP's all-reduce
        model = timm.create_model(arch, pretrained=False)
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-2
        optimizer = LARS(param_groups(model, WEIGHT_DECAY), lr=1.0, momentum=0.9, form="mlperf")
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


def sharding_table(arch: str, world_size: int, steps: int) -> None:
    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(sharded_steps, args=(world_size, port, arch, steps, results), nprocs=world_size)
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
