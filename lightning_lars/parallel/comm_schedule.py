"""One backward's gradient all-reduces on one communication channel, modelled: an all-reduce starts when its
last gradient is ready and the previous one has ended; exposed time is how long communication runs past the end
of backward. The bucket planner (``planner.py``) compares DDP's own buckets and our hooks' groups with it.

Imports its siblings ``backward_profile``, ``bucket_hook`` and ``network``.
"""

from dataclasses import dataclass

from lightning_lars.parallel.backward_profile import Profile
from lightning_lars.parallel.bucket_hook import plan_groups
from lightning_lars.parallel.network import Cluster


@dataclass
class Schedule:
    """All-reduces of one backward: the units (DDP buckets) each carries, start/end (s), totals (s)."""

    groups: list
    start_s: list
    end_s: list
    comm_s: float
    exposed_s: float


def simulate(
    profile: Profile,
    buckets: list,
    groups: list,
    cluster: Cluster,
    algorithm: str,
    num_gpus: int,
    wire_bytes_factor: float = 1.0,
    copy_s_per_byte: float = 0.0,
) -> Schedule:
    """Serial all-reduces of ``groups`` (lists of indices into ``buckets``) once their last gradient is ready."""
    bucket_bytes = [sum(profile.num_bytes[i] for i in bucket) for bucket in buckets]
    bucket_ready = [profile.ready_s[bucket[-1]] for bucket in buckets]
    clock, starts, ends, comm = 0.0, [], [], 0.0
    for group in groups:
        wire = wire_bytes_factor * sum(bucket_bytes[b] for b in group)
        duration = cluster.allreduce(algorithm, wire, num_gpus) + copy_s_per_byte * wire
        clock = max(clock, bucket_ready[group[-1]])
        starts.append(clock)
        clock += duration
        ends.append(clock)
        comm += duration
    return Schedule(groups, starts, ends, comm, max(0.0, clock - profile.backward_s))


def bucket_schedule(profile, caps_mb, cluster, algorithm, num_gpus, wire_bytes_factor=1.0) -> Schedule:
    """DDP's own buckets with these caps (``[1, 25]``: DDP's default), one all-reduce each, no hook."""
    buckets = plan_groups(profile.num_bytes, caps_mb)
    return simulate(
        profile, buckets, [[b] for b in range(len(buckets))], cluster, algorithm, num_gpus, wire_bytes_factor
    )


def grouped_schedule(
    profile,
    caps_mb,
    cluster,
    algorithm,
    num_gpus,
    wire_bytes_factor=1.0,
    copy_s_per_byte=0.0,
    ddp_bucket_mb=1.0,
) -> Schedule:
    """DDP buckets of ``ddp_bucket_mb`` coalesced by the hook's rule with ``caps_mb``; the hook's copies cost."""
    buckets = plan_groups(profile.num_bytes, [ddp_bucket_mb])
    sizes = [sum(profile.num_bytes[i] for i in bucket) for bucket in buckets]
    return simulate(
        profile,
        buckets,
        plan_groups(sizes, caps_mb),
        cluster,
        algorithm,
        num_gpus,
        wire_bytes_factor,
        copy_s_per_byte,
    )
