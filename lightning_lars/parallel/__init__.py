"""Scale-out: DDP communication hooks, strategies, FSDP, multi-node launch and the bucket planner.

Imports ``core``, ``optim`` and ``models``.
"""

import importlib

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


def __getattr__(name: str):
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *EXPORTS])
