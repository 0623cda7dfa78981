"""Alpha-beta cost models of one all-reduce: ``time = hops * latency + bytes_moved / bandwidth``.

Used by the bucket planner to reason about machines we do not have. Every model returns seconds for an
all-reduce of ``num_bytes`` over ``num_ranks`` ranks, each with ``bandwidth`` bytes/s of link to the rest
and ``latency`` seconds per message (network + library overhead).

* ring (NCCL rings, gloo): reduce-scatter + all-gather, ``2(p-1)`` steps, each moving ``n/p`` bytes.
* tree (NCCL double binary trees, pipelined): ``2 log2 p`` latency, about ``2n`` bytes per rank.
* torus2d (Mikami et al. 2018, Ying et al. 2018): ranks on an ``X x Y`` grid; reduce-scatter along X,
  all-reduce of the ``n/X`` slices along Y, all-gather along X.
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Network:
    """Latency (s per message) and per-rank bandwidth (bytes/s) of the interconnect."""

    latency: float
    bandwidth: float

    def ring(self, num_bytes: float, num_ranks: int) -> float:
        p = num_ranks
        if p <= 1:
            return 0.0
        return 2 * (p - 1) * self.latency + 2 * (p - 1) / p * num_bytes / self.bandwidth

    def tree(self, num_bytes: float, num_ranks: int) -> float:
        p = num_ranks
        if p <= 1:
            return 0.0
        return 2 * math.ceil(math.log2(p)) * self.latency + 2 * num_bytes / self.bandwidth

    def torus2d(self, num_bytes: float, num_ranks: int) -> float:
        x, y = torus_shape(num_ranks)
        if x * y <= 1:
            return 0.0
        scatter_gather = 2 * ((x - 1) * self.latency + (x - 1) / x * num_bytes / self.bandwidth)
        return scatter_gather + self.ring(num_bytes / x, y)

    def allreduce(self, algorithm: str, num_bytes: float, num_ranks: int) -> float:
        """Seconds for one all-reduce with ``algorithm`` in :data:`ALGORITHMS`."""
        return getattr(self, algorithm)(num_bytes, num_ranks)


ALGORITHMS = ("ring", "tree", "torus2d")


def torus_shape(num_ranks: int) -> tuple[int, int]:
    """The most square ``X x Y`` factorisation of ``num_ranks`` (X <= Y), e.g. 2048 -> (32, 64)."""
    x = int(math.isqrt(num_ranks))
    while num_ranks % x:
        x -= 1
    return x, num_ranks // x
