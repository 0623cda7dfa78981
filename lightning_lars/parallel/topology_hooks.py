"""2D-torus and hierarchical all-reduce as DDP comm hooks, on a ``nodes x devices`` grid of ranks.

Both keep the grouped hook's bucket grouping (:func:`~lightning_lars.parallel.bucket_hook.grouped_allreduce_hook`:
``group_caps_mb``, compression, hook norms) and replace only the one all-reduce per group:

* :func:`torus_2d_allreduce_hook` (Mikami et al. 2018, arXiv 1811.05233, sec. 3.2; Ying et al. 2018,
  arXiv 1811.06992, sec. 3.3): reduce-scatter along the horizontal ring (the ``devices`` ranks of one
  node), all-reduce of each ``1/devices`` slice along the vertical ring (the ranks with the same local
  index on every node), all-gather back along the horizontal ring. Inter-node traffic per rank is
  ``1/devices`` of the group, and the vertical ring has ``nodes`` hops instead of ``nodes x devices``.
* :func:`hierarchical_allreduce_hook` (Jia et al. 2018, arXiv 1807.11205, sec. 4.3): reduce inside the node
  to its first rank, all-reduce between the nodes' first ranks, broadcast inside the node.

Ranks are laid out as launchers number them: ``rank = node * devices + local_rank``. The grid comes from the
config (``grid: [nodes, devices]``) or from the launch: :class:`~lightning_lars.parallel.strategy.BucketedDDPStrategy`
passes ``num_nodes x devices``; outside Lightning, ``LOCAL_WORLD_SIZE`` (torchrun) gives the devices.

Stages run in program order on the thread that calls the hook, so every rank issues the same collectives in
the same order on each sub-group. The first stages ``wait()``: under NCCL that orders CUDA streams and does
not block the host; under gloo (CPU) it blocks backward while they run. The last stage completes the
bucket's Future asynchronously, as DDP requires (every Future done by the end of backward).

No ``from __future__ import annotations`` here: DDP checks the hook's annotations by identity.
"""

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from lightning_lars.core.errors import UserError
from lightning_lars.parallel.bucket_hook import GroupedAllReduceState, grouped_allreduce_hook

# torch 2.14 renames the flat-tensor collectives; older releases have only the *_tensor names.
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class _GridState(GroupedAllReduceState):
    """Grouped-hook state plus the ``[nodes, devices]`` grid and its sub-groups (made in :meth:`bind`).

    Args:
        grid: ``[nodes, devices_per_node]``; ``None`` takes it from the launch (see module docstring).
        (others): as :class:`~lightning_lars.parallel.bucket_hook.GroupedAllReduceState`; ``group_caps_mb:
            null`` reduces every DDP bucket on its own.
    """

    grid: list[int] | None = None
    _launch_grid: tuple | None = field(default=None, repr=False)
    _intra: object = field(default=None, repr=False)  # this rank's node: `devices` ranks
    _inter: object = field(default=None, repr=False)  # this rank's column: same local index, `nodes` ranks
    _node_leader: int = 0  # global rank of local index 0 on this rank's node

    def __post_init__(self):
        super().__post_init__()
        if self.process_group is not None:
            raise UserError(
                "grid all-reduce hooks run on the default (world) group: drop ddp_comm_state.process_group"
            )
        if self.grid is not None:
            self.grid = [int(n) for n in self.grid]
            if len(self.grid) != 2 or min(self.grid) < 1:
                raise UserError(f"ddp_comm_state.grid must be [nodes, devices_per_node], got {self.grid}")

    def set_launch_grid(self, num_nodes: int, devices_per_node: int) -> None:
        """The launch's shape, used when ``grid`` is not configured (called by the strategy)."""
        self._launch_grid = (int(num_nodes), int(devices_per_node))

    def resolve_grid(self, world_size: int) -> tuple[int, int]:
        """``(nodes, devices)`` from the config, else the launch, else ``LOCAL_WORLD_SIZE``; must tile the world."""
        if self.grid is not None:
            nodes, devices = self.grid
        elif self._launch_grid is not None:
            nodes, devices = self._launch_grid
        elif os.environ.get("LOCAL_WORLD_SIZE"):
            devices = int(os.environ["LOCAL_WORLD_SIZE"])
            nodes = world_size // devices
        else:
            raise UserError(
                "cannot tell the nodes x devices grid: set strategy.ddp_comm_state.grid=[NODES,DEVICES]"
            )
        if nodes * devices != world_size:
            raise UserError(
                f"grid {nodes} x {devices} does not match the {world_size} ranks: set"
                " strategy.ddp_comm_state.grid=[NODES,DEVICES] with NODES * DEVICES = world size"
            )
        return nodes, devices

    def bind(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> None:
        """As the grouped hook, and create the row and column sub-groups (every rank creates every group)."""
        super().bind(ddp_model)
        rank, world_size = dist.get_rank(), dist.get_world_size()
        self.grid = list(self.resolve_grid(world_size))
        nodes, devices = self.grid
        node, local = divmod(rank, devices)
        self._node_leader = node * devices
        for n in range(nodes):  # new_group is collective: same calls, same order, on every rank
            group = dist.new_group([n * devices + d for d in range(devices)])
            if n == node:
                self._intra = group
        self._inter = self._make_inter_groups(nodes, devices, local)

    def _make_inter_groups(self, nodes: int, devices: int, local: int):
        raise NotImplementedError


@dataclass
class Torus2DAllReduceState(_GridState):
    """State of :func:`torus_2d_allreduce_hook`: vertical rings, one per local index."""

    def _make_inter_groups(self, nodes, devices, local):
        mine = None
        for d in range(devices):
            group = dist.new_group([n * devices + d for n in range(nodes)])
            if d == local:
                mine = group
        return mine

    def allreduce_sum(self, flat: torch.Tensor) -> torch.futures.Future:
        """Reduce-scatter in the node, all-reduce the slice across nodes, all-gather in the node."""
        nodes, devices = self.grid
        numel = flat.numel()
        if devices == 1:  # a single column: the vertical ring is the whole all-reduce
            return dist.all_reduce(flat, group=self._inter, async_op=True).get_future()
        padded_numel = -(-numel // devices) * devices
        padded = flat if padded_numel == numel else torch.cat([flat, flat.new_zeros(padded_numel - numel)])
        piece = flat.new_empty(padded_numel // devices)
        _reduce_scatter(piece, padded, group=self._intra, async_op=True).wait()
        if nodes > 1:
            dist.all_reduce(piece, group=self._inter, async_op=True).wait()
        gathered = flat.new_empty(padded_numel)
        work = _all_gather(gathered, piece, group=self._intra, async_op=True)
        return work.get_future().then(lambda _: [gathered[:numel]])


@dataclass
class HierarchicalAllReduceState(_GridState):
    """State of :func:`hierarchical_allreduce_hook`: one inter-node group of the nodes' first ranks."""

    def _make_inter_groups(self, nodes, devices, local):
        group = dist.new_group([n * devices for n in range(nodes)])
        return group if local == 0 else None

    def allreduce_sum(self, flat: torch.Tensor) -> torch.futures.Future:
        """Reduce to the node's first rank, all-reduce between first ranks, broadcast in the node."""
        nodes, devices = self.grid
        if devices > 1:
            dist.reduce(flat, dst=self._node_leader, group=self._intra, async_op=True).wait()
        if nodes > 1 and self._inter is not None:
            work = dist.all_reduce(flat, group=self._inter, async_op=True)
            if devices == 1:
                return work.get_future()
            work.wait()
        if devices == 1:  # single rank overall
            done = torch.futures.Future()
            done.set_result([flat])
            return done
        work = dist.broadcast(flat, src=self._node_leader, group=self._intra, async_op=True)
        return work.get_future().then(lambda _: [flat])


def torus_2d_allreduce_hook(
    state: Torus2DAllReduceState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """The grouped hook with each group reduced by the 2D-torus algorithm (see module docstring).

    Args:
        state: grouping, compression and grid settings; bound to the model by ``register``.
        bucket: DDP's flat gradient bucket.

    Returns:
        A Future with the bucket's gradients averaged over all ranks.
    """
    return grouped_allreduce_hook(state, bucket)


def hierarchical_allreduce_hook(
    state: HierarchicalAllReduceState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """The grouped hook with each group reduced hierarchically: node, then nodes, then node (see module docstring).

    Args:
        state: grouping, compression and grid settings; bound to the model by ``register``.
        bucket: DDP's flat gradient bucket.

    Returns:
        A Future with the bucket's gradients averaged over all ranks.
    """
    return grouped_allreduce_hook(state, bucket)
