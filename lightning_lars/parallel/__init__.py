"""Scale-out: DDP communication hooks, strategies, launch and the bucket planner."""
