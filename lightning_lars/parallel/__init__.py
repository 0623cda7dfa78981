"""Scale-out: DDP communication hooks, strategies, FSDP, multi-node launch and the bucket planner.

Imports ``core``, ``optim`` and ``models``.
"""

from lightning_lars.core.lazy_exports import lazy_exports

# The public API (README, "Python API"): name -> the module defining it. Loaded on first use (PEP 562), not here:
# the launcher (`python -m lightning_lars.parallel.launch`) imports this package and starts its ranks without
# torch or Lightning.
EXPORTS = {
    "GroupedAllReduceState": "bucket_hook",
    "grouped_allreduce_hook": "bucket_hook",
    "register": "bucket_hook",
    "HierarchicalAllReduceState": "topology_hooks",
    "hierarchical_allreduce_hook": "topology_hooks",
    "Torus2DAllReduceState": "topology_hooks",
    "torus_2d_allreduce_hook": "topology_hooks",
    "BucketedDDPStrategy": "strategy",
}
__all__ = sorted(EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
