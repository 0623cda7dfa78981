"""How many loader threads (FFCV) or processes (torch DataLoader) one training process gets by default."""

from __future__ import annotations

import os

from lightning.fabric.plugins.environments import SLURMEnvironment


def default_num_workers(trainer=None) -> int:
    """The CPUs this process may use for loading, when the config leaves ``num_workers`` null.

    - Started by ``srun`` (Lightning's cluster environment is SLURM): one task per GPU, already bound by SLURM
      to its ``--cpus-per-task`` share of the node, so the task's own CPU affinity is its share; it is not
      divided again by the GPUs per node. Where SLURM does not bind tasks (no task/affinity plugin) each task
      sees the whole node: then ``SLURM_CPUS_PER_TASK`` caps it.
    - Processes started by Lightning or torchrun inherit the whole node's affinity: divided by devices per node.
    """
    cores = len(os.sched_getaffinity(0))
    if trainer is None:
        return max(1, cores)
    if isinstance(getattr(trainer.strategy, "cluster_environment", None), SLURMEnvironment):
        per_task = os.environ.get("SLURM_CPUS_PER_TASK", "")
        return max(1, min(cores, int(per_task)) if per_task.isdigit() else cores)
    return max(1, cores // trainer.num_devices)
