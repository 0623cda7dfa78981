"""Bucket planner: exposed gradient communication of fixed buckets vs growing groups, 8 to 4096 GPUs.

``python -m lightning_lars.parallel.planner --arch resnet50 --backward-ms 23 --compression fp16 --plot out.png``

The per-GPU workload is fixed (weak scaling): every row assumes the profile's backward time per step.

1. Profile: each parameter's gradient size and the time after backward starts at which it is ready,
   measured here with ``register_post_accumulate_grad_hook`` (CPU) or read from a JSON file recorded on a
   GPU with the same function (``--save-profile`` / ``--profile``). ``--backward-ms`` rescales the times
   to the backward time of the target machine.
2. Buckets as DDP builds them after its first step: consecutive gradients in ready order until a cap is
   reached. A bucket or group is ready when its last gradient is.
3. One communication channel: an all-reduce starts when its group is ready and the previous one ended;
   its time comes from the alpha-beta models in :mod:`lightning_lars.parallel.network`. Exposed time = how
   long communication runs past the end of backward.
4. Fixed: DDP buckets of 25 MiB, one all-reduce each. Grouped: DDP buckets of ``--ddp-bucket-mb`` coalesced
   by the hook's own rule (:func:`~lightning_lars.parallel.bucket_hook.plan_groups`) with geometric caps
   ``first, first*growth, ... , largest``; the caps with the least exposed time are proposed, in the form
   ``strategy.ddp_comm_state.group_caps_mb`` takes.
"""

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lightning_lars.parallel.bucket_hook import MIB, plan_groups
from lightning_lars.parallel.network import ALGORITHMS, Network
from lightning_lars.errors import UserError

GPU_COUNTS = [2**k for k in range(3, 13)]  # 8 .. 4096
FIXED_BUCKET_MB = 25.0  # DDP's default bucket cap
SEARCH_FIRST_MB = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
SEARCH_GROWTH = (1.0, 1.5, 2.0, 3.0, 4.0)
SEARCH_LARGEST_MB = (8.0, 16.0, 25.0, 50.0, 100.0)


@dataclass
class Profile:
    """Gradients in the order they become ready: bytes and seconds after backward starts."""

    arch: str
    batch_size: int
    device: str
    backward_s: float
    names: list
    num_bytes: list
    ready_s: list

    def scaled(self, backward_s: float) -> "Profile":
        """The same profile with ready times stretched so backward takes ``backward_s`` seconds."""
        factor = backward_s / self.backward_s
        return Profile(self.arch, self.batch_size, self.device, backward_s, self.names, self.num_bytes,
                       [t * factor for t in self.ready_s])


def measure_profile(arch: str = "resnet50", batch_size: int = 8, image_size: int = 224, repeats: int = 2) -> Profile:
    """Time each parameter's gradient in a real backward of ``timm.create_model(arch)`` (no weights), CPU."""
    import timm
    import torch

    model = timm.create_model(arch, pretrained=False, num_classes=1000)
    images, labels = torch.randn(batch_size, 3, image_size, image_size), torch.randint(0, 1000, (batch_size,))
    ready, start = {}, [0.0]
    for name, param in model.named_parameters():
        param.register_post_accumulate_grad_hook(lambda p, name=name: ready.__setitem__(name, time.perf_counter()))
    for _ in range(repeats):  # the first backward warms allocators up; keep the last
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        start[0] = time.perf_counter()
        loss.backward()
        backward_s = time.perf_counter() - start[0]
    sizes = {name: p.numel() * p.element_size() for name, p in model.named_parameters()}
    order = sorted(ready, key=ready.get)
    return Profile(arch, batch_size, "cpu", backward_s, order, [sizes[n] for n in order],
                   [ready[n] - start[0] for n in order])


def load_profile(path: Path) -> Profile:
    try:
        return Profile(**json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError) as error:
        raise UserError(f"cannot read profile {path}: {error}; write one with --save-profile") from error


def make_buckets(profile: Profile, caps_mb: list[float]) -> list[list[int]]:
    """DDP-style buckets (lists of gradient indices): consecutive in ready order, closed at each cap."""
    return plan_groups(profile.num_bytes, caps_mb)


@dataclass
class Schedule:
    """One backward's all-reduces: the DDP buckets each carries, start and end (s); summary times (s)."""

    groups: list  # lists of DDP bucket indices
    start_s: list
    end_s: list
    comm_s: float
    exposed_s: float


def simulate(profile: Profile, buckets: list[list[int]], groups: list[list[int]], network: Network,
             algorithm: str, num_gpus: int, wire_bytes_factor: float = 1.0) -> Schedule:
    """Serial all-reduces of ``groups`` (lists of indices into ``buckets``) after their data is ready."""
    bucket_bytes = [sum(profile.num_bytes[i] for i in bucket) for bucket in buckets]
    bucket_ready = [profile.ready_s[bucket[-1]] for bucket in buckets]
    clock, starts, ends, comm = 0.0, [], [], 0.0
    for group in groups:
        duration = network.allreduce(algorithm, wire_bytes_factor * sum(bucket_bytes[b] for b in group), num_gpus)
        clock = max(clock, bucket_ready[group[-1]])
        starts.append(clock)
        clock += duration
        ends.append(clock)
        comm += duration
    return Schedule(groups, starts, ends, comm, max(0.0, clock - profile.backward_s))


def fixed_schedule(profile, network, algorithm, num_gpus, wire_bytes_factor=1.0) -> Schedule:
    """DDP's buckets of 25 MiB, each all-reduced as it becomes ready."""
    buckets = make_buckets(profile, [FIXED_BUCKET_MB])
    return simulate(profile, buckets, [[b] for b in range(len(buckets))], network, algorithm, num_gpus,
                    wire_bytes_factor)


def growing_caps(first_mb: float, growth: float, largest_mb: float) -> list[float]:
    """``[first, first*growth, ...]`` up to ``largest`` (the last cap, which repeats)."""
    caps = [min(first_mb, largest_mb)]
    while caps[-1] < largest_mb and growth > 1:
        caps.append(min(round(caps[-1] * growth, 2), largest_mb))  # 0.01 MiB: printable as configured
    return caps if growth > 1 else [first_mb]


def grouped_schedule(profile, caps_mb, network, algorithm, num_gpus, ddp_bucket_mb=1.0, wire_bytes_factor=1.0):
    """DDP buckets of ``ddp_bucket_mb`` coalesced into groups by the hook's rule with ``caps_mb``."""
    buckets = make_buckets(profile, [ddp_bucket_mb])
    sizes = [sum(profile.num_bytes[i] for i in bucket) for bucket in buckets]
    return simulate(profile, buckets, plan_groups(sizes, caps_mb), network, algorithm, num_gpus,
                    wire_bytes_factor)


def propose_caps(profile, network, algorithm, num_gpus, ddp_bucket_mb=1.0, wire_bytes_factor=1.0):
    """Search geometric caps; returns (caps_mb, schedule) with least exposed time, then fewest groups."""
    candidates = {
        tuple(growing_caps(first, growth, largest))
        for first in SEARCH_FIRST_MB for growth in SEARCH_GROWTH for largest in SEARCH_LARGEST_MB
        if first <= largest
    }
    scored = []
    for caps in sorted(candidates):
        schedule = grouped_schedule(profile, list(caps), network, algorithm, num_gpus, ddp_bucket_mb,
                                    wire_bytes_factor)
        # Round to 1 us so ties (common when everything overlaps) go to fewer, then smaller-first groups.
        scored.append((round(schedule.exposed_s, 6), len(schedule.groups), caps, schedule))
    _, _, caps, schedule = min(scored, key=lambda item: item[:3])
    return list(caps), schedule


def plan_table(profile, network, algorithm, gpu_counts=GPU_COUNTS, ddp_bucket_mb=1.0, wire_bytes_factor=1.0):
    """Rows of dicts: per GPU count, fixed-bucket and proposed-group communication (ms) and caps (MiB)."""
    rows = []
    for gpus in gpu_counts:
        fixed = fixed_schedule(profile, network, algorithm, gpus, wire_bytes_factor)
        caps, grouped = propose_caps(profile, network, algorithm, gpus, ddp_bucket_mb, wire_bytes_factor)
        rows.append({
            "gpus": gpus, "fixed_allreduces": len(fixed.groups), "fixed_comm_ms": 1e3 * fixed.comm_s,
            "fixed_exposed_ms": 1e3 * fixed.exposed_s, "grouped_allreduces": len(grouped.groups),
            "grouped_comm_ms": 1e3 * grouped.comm_s, "grouped_exposed_ms": 1e3 * grouped.exposed_s,
            "caps_mb": caps,
        })
    return rows


def format_table(rows: list[dict]) -> str:
    """Markdown table; ratio = fixed exposed / grouped exposed (higher: grouping hides more)."""
    lines = [
        "| GPUs | fixed 25 MiB: all-reduces | comm ms | exposed ms | grouped: all-reduces | comm ms | exposed ms"
        " | exposed ratio fixed/grouped | proposed group_caps_mb |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ratio = r["fixed_exposed_ms"] / r["grouped_exposed_ms"] if r["grouped_exposed_ms"] > 1e-6 else float("inf")
        caps = "[" + ", ".join(f"{c:g}" for c in r["caps_mb"]) + "]"
        lines.append(
            f"| {r['gpus']} | {r['fixed_allreduces']} | {r['fixed_comm_ms']:.2f} | {r['fixed_exposed_ms']:.2f}"
            f" | {r['grouped_allreduces']} | {r['grouped_comm_ms']:.2f} | {r['grouped_exposed_ms']:.2f}"
            f" | {ratio:.2f} | {caps} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> None:
    """Exposed communication (ms) vs GPUs, fixed vs grouped; needs matplotlib (optional dependency)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise UserError("--plot needs matplotlib: pip install matplotlib") from error
    gpus = [r["gpus"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(gpus, [r["fixed_exposed_ms"] for r in rows], "o-", label="fixed 25 MiB buckets")
    ax.plot(gpus, [r["grouped_exposed_ms"] for r in rows], "s-", label="proposed growing groups")
    ax.set(xscale="log", xlabel="GPUs", ylabel="exposed communication per step (ms)", title=title)
    ax.set_xticks(gpus, [str(g) for g in gpus])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet50", help="timm model to profile (no weights are loaded)")
    parser.add_argument("--profile", type=Path, help="JSON profile recorded elsewhere (e.g. on a GPU)")
    parser.add_argument("--save-profile", type=Path, help="write the measured profile here")
    parser.add_argument("--measure-batch", type=int, default=8, help="images per backward when measuring")
    parser.add_argument("--backward-ms", type=float, help="target backward time per step (ms); default: as measured")
    parser.add_argument("--gpus", type=int, nargs="*", default=GPU_COUNTS, help="GPU counts for the table")
    parser.add_argument("--algorithm", choices=ALGORITHMS, default="ring")
    parser.add_argument("--latency-us", type=float, default=10.0, help="per message, network + library (us)")
    parser.add_argument("--bandwidth-gbps", type=float, default=50.0, help="per GPU (Gbit/s)")
    parser.add_argument("--compression", choices=("bf16", "fp16"), help="halve the bytes on the wire")
    parser.add_argument("--ddp-bucket-mb", type=float, default=1.0, help="DDP's buckets under the hook (MiB)")
    parser.add_argument("--plot", type=Path, help="draw exposed time vs GPUs to this PNG (needs matplotlib)")
    args = parser.parse_args(argv)
    try:
        profile = load_profile(args.profile) if args.profile else measure_profile(args.arch, args.measure_batch)
        if args.save_profile:
            args.save_profile.write_text(json.dumps(asdict(profile)))
        if args.backward_ms:
            profile = profile.scaled(args.backward_ms / 1e3)
        network = Network(latency=args.latency_us * 1e-6, bandwidth=args.bandwidth_gbps * 1e9 / 8)
        rows = plan_table(profile, network, args.algorithm, args.gpus, args.ddp_bucket_mb,
                          0.5 if args.compression else 1.0)
        header = (f"{profile.arch}: {sum(profile.num_bytes) / MIB:.1f} MiB of gradients in {len(profile.names)}"
                  f" tensors; backward {1e3 * profile.backward_s:.1f} ms (profile: {profile.device}, batch"
                  f" {profile.batch_size}); {args.algorithm} all-reduce, {args.latency_us:g} us,"
                  f" {args.bandwidth_gbps:g} Gbit/s per GPU; wire {args.compression or 'fp32'}")
        print(header + "\n\n" + format_table(rows))
        if args.plot:
            plot(rows, args.plot, f"{profile.arch}, {args.algorithm} all-reduce")
            print(f"plot: {args.plot}")
    except UserError as error:
        print(f"error: {error}")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
