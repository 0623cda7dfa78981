"""make bench-comm: DDP step time with and without our grouped all-reduce hook (2 gloo processes, one run),
and the bucket planner's table for ResNet-50 at the Fujitsu seed's scale (2048 GPUs, global batch 86,016).

``python benchmarks/bench_comm.py [--steps 20] [--out FILE]`` (results go in BENCHMARKS.md)

Step time: timm resnet18 (11.7 M parameters, 44.6 MiB of fp32 gradients), 8 images of 64 px per process,
SGD. Plain DDP (torch's buckets, no hook) and hooked DDP (1 MiB DDP buckets grouped by the hook into
[1, 4, 16, 25] MiB, as conf/strategy/ddp_bucketed.yaml) live in the same processes and alternate step by
step, so machine noise hits both alike. NCCL overhead needs a GPU: not measured here.
"""

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lightning_lars.parallel.bucket_hook import GroupedAllReduceState, register  # noqa: E402
from lightning_lars.parallel.network import Network  # noqa: E402
from lightning_lars.parallel.planner import format_table, measure_profile, plan_table  # noqa: E402

SEED_GPUS, SEED_GLOBAL_BATCH = 2048, 86_016  # Fujitsu MLPerf v0.6 (records.md): 42 images per GPU
# Our estimate, not published: a V100 trains ResNet-50 in fp16 at ~1,200 img/s, so 42 images take ~35 ms,
# about 2/3 of it backward.
SEED_BACKWARD_MS = 23.0
NETWORK = dict(latency_us=10.0, bandwidth_gbps=50.0)  # our choice: 2x EDR InfiniBand per 4 GPUs (ABCI-like)


def step_times(rank: int, port: int, steps: int, results) -> None:
    import timm

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)  # 2 processes on 2 cores
    models = {}
    for name in ("plain", "hooked"):
        torch.manual_seed(0)
        net = timm.create_model("resnet18", pretrained=False, num_classes=100)
        ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=1 if name == "hooked" else None,
                                                        gradient_as_bucket_view=True)
        if name == "hooked":
            register(ddp, GroupedAllReduceState([1, 4, 16, 25]))
        models[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9))
    images, labels = torch.randn(8, 3, 64, 64), torch.randint(0, 100, (8,))
    times = {name: [] for name in models}
    for step in range(steps + 3):  # 3 warm-up steps (DDP rebuilds its buckets after the first)
        for name, (ddp, optimizer) in models.items():
            dist.barrier()
            start = time.perf_counter()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(ddp(images), labels).backward()
            optimizer.step()
            if step >= 3:
                times[name].append(time.perf_counter() - start)
    if rank == 0:
        results.update({name: statistics.median(t) for name, t in times.items()})
    dist.destroy_process_group()


def planner_section() -> str:
    profile = measure_profile("resnet50", batch_size=8).scaled(SEED_BACKWARD_MS / 1e3)
    network = Network(NETWORK["latency_us"] * 1e-6, NETWORK["bandwidth_gbps"] * 1e9 / 8)
    parts = []
    for algorithm in ("ring", "torus2d"):
        rows = plan_table(profile, network, algorithm, wire_bytes_factor=0.5)  # fp16 on the wire, as the seed
        parts.append(f"#### {algorithm} all-reduce\n\n{format_table(rows)}")
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown tables to FILE")
    args = parser.parse_args()
    with mp.Manager() as manager:
        results = manager.dict()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.spawn(step_times, args=(port, args.steps, results), nprocs=2, join=True)
        plain, hooked = results["plain"], results["hooked"]
    step_table = "\n".join([
        "| DDP on 2 gloo processes (resnet18, 8 x 64 px per process) | median step ms | ratio vs plain |",
        "|---|---:|---:|",
        f"| plain DDP (torch buckets, no hook) | {1e3 * plain:.1f} | 1.00 |",
        f"| grouped hook, fp32, groups [1, 4, 16, 25] MiB | {1e3 * hooked:.1f} | {hooked / plain:.2f} |",
    ])
    text = "\n".join([
        "## Communication (make bench-comm)", "",
        f"Command: `python benchmarks/bench_comm.py --steps {args.steps}`  ",
        "Machine: 2-core x86_64 CPU, 24 GiB, no GPU. Date: 2026-11-22. torch " + torch.__version__ + ".", "",
        "### Step time with and without the hook (one run, alternating steps)", "", step_table, "",
        "NCCL hook overhead: not measured (no GPU lent to this session).", "",
        f"### Planner: ResNet-50 at the seed's scale ({SEED_GPUS} GPUs x 42 images = {SEED_GLOBAL_BATCH:,})", "",
        f"Profile: timm resnet50 gradient-ready times measured on this CPU (batch 8), rescaled to a"
        f" {SEED_BACKWARD_MS:g} ms backward (our estimate for 42 images on a V100 in fp16); fp16 gradients on"
        f" the wire; {NETWORK['latency_us']:g} us per message, {NETWORK['bandwidth_gbps']:g} Gbit/s per GPU"
        " (our choice). Fixed = DDP's 25 MiB buckets; grouped = 1 MiB DDP buckets coalesced by the hook with"
        " the proposed caps. A model, not a measurement: exposed ms = communication still running after"
        " backward ends.", "",
        planner_section(), "",
    ])
    if args.out is not None:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
