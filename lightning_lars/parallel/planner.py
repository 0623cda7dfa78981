"""Bucket planner: exposed gradient communication of DDP's real buckets, ``bucket_cap_mb_list`` and our hooks.

``python -m lightning_lars.parallel.planner --arch resnet50 --batch-size 42 --compression fp16``

Weak scaling: every GPU keeps the same batch; one row per GPU count.

1. Profile (:mod:`~lightning_lars.parallel.backward_profile`): when each gradient is ready, from per-layer
   FLOPs and activation bytes on a :class:`Device` (deterministic), or a stored measured profile (``--profile``).
2. Calibration: the device's FLOP rate is solved so that the modelled step of the seed run (Fujitsu, MLPerf
   v0.6: ResNet-50, 2,048 V100 on ABCI, 42 images per GPU, fp16, grouped all-reduce) equals its logged step
   time, :data:`SEED_STEP_S`; the network is ABCI's (:data:`~lightning_lars.parallel.network.ABCI`).
3. Schedules (:mod:`~lightning_lars.parallel.comm_schedule`), one communication channel (an all-reduce starts
   when its data is ready and the previous one ended; exposed = how long communication runs past the end of
   backward):
   * DDP default: buckets in gradient-ready order, the first capped at 1 MiB, the rest at 25 MiB (torch's
     ``_DEFAULT_FIRST_BUCKET_BYTES`` and ``bucket_cap_mb``; the rule DDP applies when it rebuilds its
     buckets after the first step), one NCCL all-reduce each.
   * ``bucket_cap_mb_list`` (torch >= 2.13): DDP's buckets with per-bucket caps, no hook.
   * grouped hook: 1 MiB DDP buckets coalesced by :func:`~lightning_lars.parallel.bucket_hook.plan_groups`;
     each group also pays the hook's copies (concatenate, write back: 4 bytes moved per byte, on the GPU).
   * the 2D-torus and hierarchical hooks: the grouped hook with those algorithms (network.py).
   For the last three, the caps ``[first, first*growth, ..., largest]`` with the least exposed time are
   proposed.
"""

import argparse
import math

from lightning_lars.core.errors import UserError
from lightning_lars.parallel.backward_profile import (
    Device,
    Profile,
    count_costs,
    load_profile,
    measure_profile,
    save_profile,
    timed_profile,
)
from lightning_lars.parallel.bucket_hook import MIB
from lightning_lars.parallel.comm_schedule import Schedule, bucket_schedule, grouped_schedule
from lightning_lars.parallel.network import ABCI, Cluster

GPU_COUNTS = [2**k for k in range(3, 13)]  # 8 .. 4096
DDP_DEFAULT_CAPS_MB = [1.0, 25.0]  # torch: 1 MiB first bucket, then bucket_cap_mb = 25
SEARCH_FIRST_MB = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
SEARCH_GROWTH = (1.0, 1.5, 2.0, 3.0, 4.0)
SEARCH_LARGEST_MB = (8.0, 16.0, 25.0, 50.0, 100.0)

# Calibration target: the seed's own run. mlcommons/training_results_v0.6, Fujitsu/results/
# abci_2048xV100_mxnet/resnet/result_0.txt: epochs 61-90 (epoch_start -> epoch_stop, evals excluded) took
# 0.680-0.817 s, median 0.733 s, for 15 steps each (ceil(625 / 42) images per GPU and epoch): 48.9 ms a step.
# The whole run (run_start -> run_stop) took 70.4 s with initialisation and evaluations.
SEED_STEP_S = 0.733 / 15
SEED_GPUS, SEED_BATCH_PER_GPU = 2048, 42  # 86,016 images per step
V100_MEMORY_BANDWIDTH = 900e9  # bytes/s, HBM2 (NVIDIA V100 datasheet)
OPTIMIZER_BYTES_PER_PARAM = 24  # LARS in fp32: read w, g, m; write w, m; write the fp16 copy (our count)


def growing_caps(first_mb: float, growth: float, largest_mb: float) -> list[float]:
    """``[first, first*growth, ...]`` up to ``largest`` (the last cap, which repeats)."""
    caps = [min(first_mb, largest_mb)]
    while caps[-1] < largest_mb and growth > 1:
        caps.append(min(round(caps[-1] * growth, 2), largest_mb))  # 0.01 MiB: printable as configured
    return caps if growth > 1 else [first_mb]


def propose_caps(make_schedule) -> tuple[list[float], Schedule]:
    """Least exposed time over geometric caps (ties: fewer all-reduces, then smaller caps)."""
    candidates = {
        tuple(growing_caps(first, growth, largest))
        for first in SEARCH_FIRST_MB
        for growth in SEARCH_GROWTH
        for largest in SEARCH_LARGEST_MB
        if first <= largest
    }
    scored = []
    for caps in sorted(candidates):
        schedule = make_schedule(list(caps))
        scored.append((round(schedule.exposed_s, 6), len(schedule.groups), caps, schedule))  # 1 us ties
    _, _, caps, schedule = min(scored, key=lambda item: item[:3])
    return list(caps), schedule


def optimizer_s(profile: Profile, device: Device) -> float:
    return OPTIMIZER_BYTES_PER_PARAM * sum(profile.num_bytes) / 4 / device.memory_bandwidth


def step_s(profile: Profile, schedule: Schedule, device: Device) -> float:
    """Forward + backward + exposed communication + optimizer step, seconds."""
    return profile.forward_s + profile.backward_s + schedule.exposed_s + optimizer_s(profile, device)


def calibrate(
    costs: tuple,
    cluster: Cluster = ABCI,
    num_gpus: int = SEED_GPUS,
    target_s: float = SEED_STEP_S,
    memory_bandwidth: float = V100_MEMORY_BANDWIDTH,
    wire_bytes_factor: float = 0.5,
) -> Device:
    """The FLOP rate at which the seed's modelled step (grouped hook, proposed caps, NCCL) takes ``target_s``."""

    def modelled(rate):
        device = Device(rate, memory_bandwidth)
        profile = timed_profile(costs, device)
        copy = 4 / memory_bandwidth
        _, schedule = propose_caps(
            lambda caps: grouped_schedule(profile, caps, cluster, "nccl", num_gpus, wire_bytes_factor, copy)
        )
        return step_s(profile, schedule, device)

    low, high = 1e12, 1e15  # FLOP/s; the step time falls as the rate rises
    if modelled(high) > target_s:
        raise UserError(
            f"no FLOP rate reaches a {1e3 * target_s:.1f} ms step: the network model alone is slower"
        )
    for _ in range(40):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if modelled(middle) > target_s else (low, middle)
    return Device(high, memory_bandwidth)


def plan_table(
    profile: Profile, device: Device, cluster: Cluster, gpu_counts=GPU_COUNTS, wire_bytes_factor: float = 1.0
) -> list[dict]:
    """Per GPU count: exposed ms of each scheme, the proposed caps and the step time (ms)."""
    copy = 4 / device.memory_bandwidth
    rows = []
    for gpus in gpu_counts:
        default = bucket_schedule(profile, DDP_DEFAULT_CAPS_MB, cluster, "nccl", gpus, wire_bytes_factor)
        row = {
            "gpus": gpus,
            "nodes": cluster.shape(gpus)[0],
            "default": default,
            "default_step_ms": 1e3 * step_s(profile, default, device),
        }
        row["list_caps"], row["list"] = propose_caps(
            lambda caps, gpus=gpus: bucket_schedule(profile, caps, cluster, "nccl", gpus, wire_bytes_factor)
        )
        for name, algorithm in (
            ("grouped", "nccl"),
            ("torus2d", "torus2d"),
            ("hierarchical", "hierarchical"),
        ):
            row[f"{name}_caps"], row[name] = propose_caps(
                lambda caps, algorithm=algorithm, gpus=gpus: grouped_schedule(
                    profile, caps, cluster, algorithm, gpus, wire_bytes_factor, copy
                )
            )
        best = min(
            (row[k] for k in ("default", "list", "grouped", "torus2d", "hierarchical")),
            key=lambda s: s.exposed_s,
        )
        row["best_step_ms"] = 1e3 * step_s(profile, best, device)
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    """Markdown: exposed communication (ms) per scheme, caps (MiB), step time (ms) of the default and the best."""
    caps = lambda c: "[" + ", ".join(f"{x:g}" for x in c) + "]"
    lines = [
        (
            "| GPUs (nodes) | DDP default [1, 25] | bucket_cap_mb_list | grouped hook | torus2d hook"
            " | hierarchical hook | step: default / best |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = [f"{1e3 * r['default'].exposed_s:.2f}"]
        cells += [
            f"{1e3 * r[k].exposed_s:.2f} {caps(r[k + '_caps'])}"
            for k in ("list", "grouped", "torus2d", "hierarchical")
        ]
        lines.append(
            f"| {r['gpus']} ({r['nodes']}) | "
            + " | ".join(cells)
            + f" | {r['default_step_ms']:.1f} / {r['best_step_ms']:.1f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: str, title: str) -> None:
    """Exposed communication (ms) vs GPUs for every scheme; needs matplotlib (``pip install '.[plot]'``)."""
    try:
        import matplotlib  # an optional extra (pip install '.[plot]'): only for --plot

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # after use('Agg'): no display on compute nodes
    except ImportError as error:
        raise UserError("--plot needs matplotlib: pip install 'lightning-lars[plot]'") from error
    gpus = [r["gpus"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (
        ("default", "DDP default [1, 25] MiB"),
        ("list", "bucket_cap_mb_list"),
        ("grouped", "grouped hook"),
        ("torus2d", "2D-torus hook"),
        ("hierarchical", "hierarchical hook"),
    ):
        ax.plot(gpus, [1e3 * r[key].exposed_s for r in rows], "o-", label=label)
    ax.set(xscale="log", xlabel="GPUs", ylabel="exposed communication per step (ms)", title=title)
    ax.set_xticks(gpus, [str(g) for g in gpus])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet50", help="timm model (FLOPs counted on the meta device)")
    parser.add_argument("--batch-size", type=int, default=SEED_BATCH_PER_GPU, help="images per GPU")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--profile", help="stored measured profile (JSON) instead of the FLOPs profile")
    parser.add_argument(
        "--measure", metavar="DEVICE", help="measure a profile on DEVICE (e.g. cuda) and use it"
    )
    parser.add_argument("--save-profile", help="write the profile used to this JSON file")
    parser.add_argument("--tflops", type=float, help="sustained TFLOP/s; default: calibrated to the seed run")
    parser.add_argument(
        "--memory-gbs", type=float, default=V100_MEMORY_BANDWIDTH / 1e9, help="GPU memory, GB/s"
    )
    parser.add_argument("--gpus", type=int, nargs="*", default=GPU_COUNTS)
    parser.add_argument("--gpus-per-node", type=int, default=ABCI.gpus_per_node)
    parser.add_argument("--nic-gbps", type=float, default=ABCI.nic_bandwidth * 8e-9, help="per node, Gbit/s")
    parser.add_argument(
        "--nvlink-gbps", type=float, default=ABCI.intra_bandwidth * 8e-9, help="per GPU, Gbit/s"
    )
    parser.add_argument("--inter-latency-us", type=float, default=ABCI.inter_latency * 1e6)
    parser.add_argument("--compression", choices=("bf16", "fp16"), help="gradients on the wire in 16 bits")
    parser.add_argument("--plot", help="draw exposed time vs GPUs to this PNG (needs matplotlib)")
    args = parser.parse_args(argv)
    try:
        costs = count_costs(args.arch, args.batch_size, args.image_size)
        device = (
            Device(args.tflops * 1e12, args.memory_gbs * 1e9)
            if args.tflops
            else calibrate(count_costs("resnet50", SEED_BATCH_PER_GPU))
        )
        if args.profile:
            profile = load_profile(args.profile)
        elif args.measure:
            profile = measure_profile(args.arch, args.batch_size, args.image_size, args.measure)
        else:
            profile = timed_profile(costs, device, args.arch, args.batch_size)
        if args.save_profile:
            save_profile(profile, args.save_profile)
        cluster = Cluster(
            args.gpus_per_node,
            args.nic_gbps * 1e9 / 8,
            args.nvlink_gbps * 1e9 / 8,
            args.inter_latency_us * 1e-6,
            ABCI.intra_latency,
            ABCI.nics_per_node,
        )
        rows = plan_table(profile, device, cluster, args.gpus, 0.5 if args.compression else 1.0)
        print(
            f"{profile.arch}, {profile.batch_size} images per GPU: {sum(profile.num_bytes) / MIB:.1f} MiB of"
            f" fp32 gradients in {len(profile.names)} tensors; forward {1e3 * profile.forward_s:.1f} ms,"
            f" backward {1e3 * profile.backward_s:.1f} ms (profile: {profile.source},"
            f" {device.flop_rate / 1e12:.1f} TFLOP/s); {args.gpus_per_node} GPUs per node, NICs"
            f" {args.nic_gbps:g} Gbit/s per node, NVLink {args.nvlink_gbps:g} Gbit/s per GPU; wire"
            f" {args.compression or 'fp32'}. Exposed communication per step, ms [proposed caps, MiB]:\n"
        )
        print(format_table(rows))
        if args.plot:
            plot(rows, args.plot, f"{profile.arch}, {profile.batch_size} images per GPU")
            print(f"plot: {args.plot}")
    except UserError as error:
        print(f"error: {error}")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
