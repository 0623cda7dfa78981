"""Under srun the loader gets the task's own CPU affinity (a process really bound by taskset, with
the variables srun sets), not that share divided again by the GPUs per node; processes Lightning starts itself
share the node's cores. Subprocesses (taskset binds a whole process): slow tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CORES = len(os.sched_getaffinity(0))


PICK_WORKERS = """
import json, os, lightning as L
from lightning_lars.data.ffcv_datamodule import FFCVDataModule
from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule
trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_progress_bar=False)
picked = {"affinity": len(os.sched_getaffinity(0)), "env": type(trainer.strategy.cluster_environment).__name__}
for cls in (FFCVDataModule, TorchvisionDataModule):
    dm = cls("train.beton", "val.beton", num_classes=10) if cls is FFCVDataModule else cls("data", num_classes=10)
    dm.trainer = trainer
    picked[cls.__name__] = dm._workers()
print(json.dumps(picked))
"""


def pick_workers(cpus: str, slurm: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC", "LOCAL_RANK"))}
    result = subprocess.run(
        ["taskset", "-c", cpus, sys.executable, "-c", PICK_WORKERS],
        cwd=ROOT,
        env={**env, **slurm},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def srun_task(cpus_per_task: int) -> dict[str, str]:
    """What srun sets in task 0 of a one-node job with 2 tasks (``--ntasks-per-node=2 --cpus-per-task=N``)."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "lars-demo",
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NNODES": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODELIST": "localhost",
        "SLURM_CPUS_PER_TASK": str(cpus_per_task),
        "SLURM_STEP_ID": "0",
    }


@pytest.mark.skipif(CORES < 2, reason="needs 2 cores to bind a task to 2")
def test_under_srun_the_loader_uses_the_tasks_own_affinity():
    bound = 2  # srun --cpus-per-task=2 on a node with 2 tasks: main gave 2 // 2 = 1 thread
    picked = pick_workers("0-1", srun_task(bound))
    assert picked["env"] == "SLURMEnvironment" and picked["affinity"] == bound
    assert picked["FFCVDataModule"] == bound and picked["TorchvisionDataModule"] == bound


def test_processes_lightning_starts_share_the_nodes_cores():
    picked = pick_workers(f"0-{CORES - 1}", {})
    assert picked["env"] != "SLURMEnvironment"
    assert picked["FFCVDataModule"] == picked["TorchvisionDataModule"] == max(1, CORES // 2)
