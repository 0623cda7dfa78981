"""make bench-comm: DDP step time on 4 gloo processes (2 x 2 grid) with DDP's default buckets,
``bucket_cap_mb_list``, the grouped hook and the 2D-torus and hierarchical hooks, in one run; then the bucket
planner's tables for ResNet-50, calibrated to the seed run (Fujitsu, 2,048 V100, 86,016 images per step).

``python benchmarks/bench_comm.py [--steps 6] [--out FILE]`` (results go in BENCHMARKS.md)

Step time: timm resnet18 (11.7 M parameters, 44.6 MiB of fp32 gradients), 4 images of 32 px per process,
SGD; every variant lives in the same 4 processes and they alternate step by step, so machine noise hits all
alike. NCCL needs GPUs: not measured here.
"""

import argparse
import datetime
import os
import platform
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lightning_lars.parallel.backward_profile import Device, count_costs, timed_profile
from lightning_lars.parallel.bucket_hook import GroupedAllReduceState, register
from lightning_lars.parallel.network import ABCI, Cluster
from lightning_lars.parallel.planner import (
    SEED_BATCH_PER_GPU,
    SEED_GPUS,
    SEED_STEP_S,
    calibrate,
    format_table,
    plan_table,
)
from lightning_lars.parallel.strategy import supports_bucket_cap_mb_list
from lightning_lars.parallel.topology_hooks import (
    HierarchicalAllReduceState,
    Torus2DAllReduceState,
    hierarchical_allreduce_hook,
    torus_2d_allreduce_hook,
)

WORLD_SIZE, GRID = 4, [2, 2]
CAPS = [1, 4, 16, 25]  # MiB, as conf/strategy/ddp_bucketed.yaml
VARIANTS = {
    "DDP default (1 MiB first bucket, then 25 MiB)": {},
    f"DDP bucket_cap_mb_list={CAPS}": {"bucket_cap_mb_list": CAPS},
    f"grouped hook, groups {CAPS} MiB": {"hook": (GroupedAllReduceState, None)},
    "2D-torus hook (2 x 2), same groups": {"hook": (Torus2DAllReduceState, torus_2d_allreduce_hook)},
    "hierarchical hook (2 x 2), same groups": {
        "hook": (HierarchicalAllReduceState, hierarchical_allreduce_hook)
    },
}


def step_times(rank: int, port: int, steps: int, results) -> None:
    import timm

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    torch.set_num_threads(1)  # 4 processes on a few cores
    models = {}
    for name, variant in VARIANTS.items():
        if "bucket_cap_mb_list" in variant and not supports_bucket_cap_mb_list():
            continue
        torch.manual_seed(0)
        net = timm.create_model("resnet18", pretrained=False, num_classes=100)
        kwargs = (
            {"bucket_cap_mb_list": variant["bucket_cap_mb_list"]} if "bucket_cap_mb_list" in variant else {}
        )
        if "hook" in variant:
            kwargs["bucket_cap_mb"] = 1
        ddp = torch.nn.parallel.DistributedDataParallel(net, gradient_as_bucket_view=True, **kwargs)
        if "hook" in variant:
            state_cls, hook = variant["hook"]
            if hook is None:
                register(ddp, state_cls(CAPS))
            else:
                register(ddp, state_cls(CAPS, grid=GRID), hook)
        models[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9))
    images, labels = torch.randn(4, 3, 32, 32), torch.randint(0, 100, (4,))
    times = {name: [] for name in models}
    for step in range(steps + 2):  # 2 warm-up steps (DDP rebuilds its buckets after the first)
        for name, (ddp, optimizer) in models.items():
            dist.barrier()
            start = time.perf_counter()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(ddp(images), labels).backward()
            optimizer.step()
            if step >= 2:
                times[name].append(time.perf_counter() - start)
    if rank == 0:
        results.update({name: statistics.median(t) for name, t in times.items()})
    dist.destroy_process_group()


def machine() -> str:
    memory = ""
    if Path("/proc/meminfo").exists():
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    load = f", load average {os.getloadavg()[0]:.1f} at the end" if hasattr(os, "getloadavg") else ""
    return f"{os.cpu_count()}-core {platform.machine()} CPU{memory}, {gpu}{load}"


def planner_section() -> str:
    seed_costs = count_costs("resnet50", SEED_BATCH_PER_GPU)
    v100 = calibrate(seed_costs)  # FLOP rate at which the modelled seed step equals the logged one
    profile = timed_profile(seed_costs, v100, "resnet50", SEED_BATCH_PER_GPU)
    faster = Device(4 * v100.flop_rate, 4 * v100.memory_bandwidth)
    ethernet = Cluster(
        gpus_per_node=8,
        nic_bandwidth=100e9 / 8,
        intra_bandwidth=50e9,
        inter_latency=30e-6,
        intra_latency=3e-6,
        nics_per_node=1,
    )
    scenarios = [
        ("A. The seed: V100, ABCI (4 GPUs and 2 x 100 Gbit/s InfiniBand per node)", profile, v100, ABCI),
        (
            "B. GPUs 4x faster (FLOPs and memory), same ABCI network",
            timed_profile(seed_costs, faster, "resnet50", 42),
            faster,
            ABCI,
        ),
        (
            "C. V100, 8 GPUs per node on one 100 Gbit/s Ethernet NIC (30 us per message)",
            profile,
            v100,
            ethernet,
        ),
    ]
    parts = [
        (
            f"Calibration: the seed's logged step, {1e3 * SEED_STEP_S:.1f} ms (median epoch of 15 steps in"
            " mlcommons/training_results_v0.6 Fujitsu/results/abci_2048xV100_mxnet/resnet/result_0.txt, epochs"
            f" 61-90), is met at {v100.flop_rate / 1e12:.1f} TFLOP/s sustained with 900 GB/s memory: forward"
            f" {1e3 * profile.forward_s:.1f} ms, backward {1e3 * profile.backward_s:.1f} ms for 42 images"
            " (FLOPs counted by torch on the meta device), grouped all-reduce with the proposed caps, NCCL"
            " ring/tree, fp16 gradients on the wire."
        )
    ]
    for title, prof, device, cluster in scenarios:
        rows = plan_table(prof, device, cluster, wire_bytes_factor=0.5)
        parts.append(
            f"#### {title}\n\nExposed communication per step in ms [proposed caps, MiB]; last column:"
            f" modelled step ms with DDP's default / with the best scheme.\n\n{format_table(rows)}"
        )
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown to FILE")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC)
    with mp.Manager() as manager:
        results = manager.dict()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.spawn(step_times, args=(port, args.steps, results), nprocs=WORLD_SIZE, join=True)
        results = dict(results)
    baseline = results[next(iter(VARIANTS))]
    step_table = "\n".join(
        [
            "| DDP on 4 gloo processes (resnet18, 4 x 32 px per process) | median step ms | ratio vs DDP default |",
            "|---|---:|---:|",
        ]
        + [f"| {name} | {1e3 * t:.1f} | {t / baseline:.2f} |" for name, t in results.items()]
    )
    text = "\n".join(
        [
            "## Communication (make bench-comm)",
            "",
            f"Command: `python benchmarks/bench_comm.py --steps {args.steps}`  ",
            f"Machine: {machine()}. Date: {started:%Y-%m-%d %H:%M} UTC. torch {torch.__version__}.",
            "",
            "### Step time on 4 gloo processes (one run, variants alternate step by step)",
            "",
            step_table,
            "",
            f"### Planner: ResNet-50, {SEED_GPUS} GPUs x 42 images = 86,016 at the seed's scale, 8 to 4096 GPUs",
            "",
            planner_section(),
            "",
        ]
    )
    if args.out is not None:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
