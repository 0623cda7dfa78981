"""Alpha-beta cost models of one all-reduce on a cluster of nodes: NVLink inside a node, NICs between nodes.

Every model returns seconds for an all-reduce of ``num_bytes`` over ``num_gpus`` GPUs laid out
``nodes x gpus_per_node`` (``N x G``). Bandwidth between nodes is the node's NICs together (``nic_bandwidth``,
one direction), shared by the node's GPUs; inside a node each GPU has ``intra_bandwidth`` of NVLink. Costs:
``hops * latency + bytes / bandwidth`` per phase.

* ``ring``: one flat ring through all ``N G`` GPUs (gloo; NCCL rings). Every ring step waits for its
  slowest link, so with ``N > 1`` each of the ``2(NG - 1)`` steps costs an inter-node latency; each node's
  NICs carry ``2(NG-1)/NG * n`` bytes.
* ``tree``: NCCL's double binary tree between nodes, a chain inside each (NCCL >= 2.4):
  ``2 (log2 N * a_inter + (G - 1) * a_intra)`` latency, ``2n`` bytes through each node's NICs.
* ``nccl``: the faster of ``ring`` and ``tree`` per message, as NCCL's tuner chooses by size and scale.
* ``hierarchical`` (Jia et al. 2018, sec. 4.3): reduce inside the node to one GPU, an all-reduce between
  the nodes' first GPUs (each drives one NIC: ``nic_bandwidth / nics_per_node``), broadcast inside.
* ``torus2d`` (Mikami et al. 2018, sec. 3.2; Ying et al. 2018, sec. 3.3): reduce-scatter inside the node,
  ``G`` column all-reduces of ``n/G`` bytes between nodes in parallel (all NICs busy), all-gather inside.
  The between-node stage of both is ``dist.all_reduce`` on a sub-group in our hooks, so NCCL picks ring or
  tree for it: modelled as the faster of the two.
"""

import math
from dataclasses import dataclass

ALGORITHMS = ("ring", "tree", "nccl", "hierarchical", "torus2d")


@dataclass(frozen=True)
class Cluster:
    """Nodes of ``gpus_per_node`` GPUs. Bandwidths in bytes/s (one direction), latencies in s per message."""

    gpus_per_node: int
    nic_bandwidth: float  # per node, all NICs together
    intra_bandwidth: float  # per GPU, NVLink (or PCIe) inside the node
    inter_latency: float  # one message between nodes: network + library
    intra_latency: float  # one message inside a node
    nics_per_node: int = 1

    def shape(self, num_gpus: int) -> tuple[int, int]:
        """``(nodes, gpus per node)`` of ``num_gpus`` GPUs filling whole nodes first."""
        per_node = min(self.gpus_per_node, num_gpus)
        return math.ceil(num_gpus / per_node), per_node

    def ring(self, num_bytes: float, num_gpus: int) -> float:
        nodes, _ = self.shape(num_gpus)
        if num_gpus <= 1:
            return 0.0
        steps = 2 * (num_gpus - 1)
        bandwidth = min(self.nic_bandwidth, self.intra_bandwidth) if nodes > 1 else self.intra_bandwidth
        latency = self.inter_latency if nodes > 1 else self.intra_latency
        return steps * latency + steps / num_gpus * num_bytes / bandwidth

    def tree(self, num_bytes: float, num_gpus: int) -> float:
        nodes, per_node = self.shape(num_gpus)
        if num_gpus <= 1:
            return 0.0
        latency = 2 * (math.ceil(math.log2(nodes)) * self.inter_latency + (per_node - 1) * self.intra_latency)
        bandwidth = min(self.nic_bandwidth, self.intra_bandwidth) if nodes > 1 else self.intra_bandwidth
        return latency + 2 * num_bytes / bandwidth

    def nccl(self, num_bytes: float, num_gpus: int) -> float:
        return min(self.ring(num_bytes, num_gpus), self.tree(num_bytes, num_gpus))

    def _intra_ring_phase(self, num_bytes: float, per_node: int) -> float:
        """One reduce-scatter or all-gather (or pipelined reduce / broadcast) inside a node."""
        if per_node <= 1:
            return 0.0
        return (per_node - 1) * self.intra_latency + (
            per_node - 1
        ) / per_node * num_bytes / self.intra_bandwidth

    def _between_nodes(self, num_bytes: float, nodes: int, bandwidth: float) -> float:
        """An all-reduce of one rank per node (``bandwidth`` each): ring or tree, whichever NCCL would pick."""
        if nodes <= 1:
            return 0.0
        ring = 2 * (nodes - 1) * self.inter_latency + 2 * (nodes - 1) / nodes * num_bytes / bandwidth
        tree = 2 * math.ceil(math.log2(nodes)) * self.inter_latency + 2 * num_bytes / bandwidth
        return min(ring, tree)

    def hierarchical(self, num_bytes: float, num_gpus: int) -> float:
        nodes, per_node = self.shape(num_gpus)
        inside = 2 * self._intra_ring_phase(num_bytes, per_node)
        return inside + self._between_nodes(num_bytes, nodes, self.nic_bandwidth / self.nics_per_node)

    def torus2d(self, num_bytes: float, num_gpus: int) -> float:
        nodes, per_node = self.shape(num_gpus)
        inside = 2 * self._intra_ring_phase(num_bytes, per_node)
        # per_node column all-reduces of num_bytes / per_node each, sharing the node's NICs
        return inside + self._between_nodes(num_bytes / per_node, nodes, self.nic_bandwidth / per_node)

    def allreduce(self, algorithm: str, num_bytes: float, num_gpus: int) -> float:
        """Seconds for one all-reduce with ``algorithm`` in :data:`ALGORITHMS`."""
        return getattr(self, algorithm)(num_bytes, num_gpus)


# ABCI compute node (AIST), where the seed run trained: 4 V100 SXM2 on NVLink2 and 2 InfiniBand EDR HCAs
# (2 x 100 Gbit/s) per node. Latencies are our choice (NCCL over IB: ~10 us per step; NVLink: ~3 us).
ABCI = Cluster(
    gpus_per_node=4,
    nic_bandwidth=2 * 100e9 / 8,
    intra_bandwidth=50e9,
    inter_latency=10e-6,
    intra_latency=3e-6,
    nics_per_node=2,
)
