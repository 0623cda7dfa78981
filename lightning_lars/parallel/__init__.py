"""Scale-out: DDP communication hooks, strategies, FSDP, multi-node launch and the bucket planner.

Imports ``core``, ``optim`` and ``models``.
"""
