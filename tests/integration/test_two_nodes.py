"""Two "nodes" on one machine: the real entry point, the demo recipe, our hooked DDP; all ranks agree."""

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from helpers import TESTS_DIR, free_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
NUM_NODES = 2


class SaveWeightsPerRank(L.Callback):
    """Writes every rank's final weights (DDP checkpoints hold rank 0's only), for the test to compare."""

    def __init__(self, out_dir: str):
        self.out_dir = Path(out_dir)

    def on_train_end(self, trainer, pl_module):
        torch.save(
            {"weights": pl_module.state_dict(), "global_step": trainer.global_step},
            self.out_dir / f"rank{trainer.global_rank}.pt",
        )


@pytest.mark.demo_data(train_per_class=20, val_per_class=4)  # made by the test session: no make demo needed
def test_two_node_launch_trains_the_demo_recipe_and_ranks_end_equal(data_dir, tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SLURM_") and k not in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK")
    }
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE=str(NUM_NODES),
        WANDB_MODE="offline",  # the nodes import this module (its callback), which imports helpers
        PYTHONPATH=os.pathsep.join([str(REPO), str(Path(__file__).parent), str(TESTS_DIR)]),
    )
    command = [
        # debug=toy: 3 steps of global batch 64 on CPU (32 images per "node")
        sys.executable,
        "-m",
        "lightning_lars.train",
        "recipe=demo",
        "debug=toy",
        f"trainer.num_nodes={NUM_NODES}",
        "trainer.devices=1",
        "trainer.accelerator=cpu",
        "strategy=ddp_bucketed",
        "strategy.bucket_cap_mb=0.25",
        "strategy.ddp_comm_state.group_caps_mb=[0.25,1,4]",
        "+callbacks.save_weights._target_=test_two_nodes.SaveWeightsPerRank",
        f"+callbacks.save_weights.out_dir={tmp_path}",
        "logger.mode=offline",
        f"paths.data_dir={data_dir}",
        f"hydra.run.dir={tmp_path}/run",  # one run dir for both "nodes"
    ]
    nodes = [
        subprocess.Popen(
            command,
            cwd=REPO,
            env={**env, "NODE_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(NUM_NODES)
    ]
    try:
        outputs = [node.communicate(timeout=420)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill() if node.poll() is None else None
    for rank, (node, output) in enumerate(zip(nodes, outputs)):
        assert node.returncode == 0, f"node {rank} failed:\n{output[-3000:]}"
    saved = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(NUM_NODES)]
    assert [s["global_step"] for s in saved] == [3, 3]  # three optimizer steps ran on both nodes
    weights = [s["weights"] for s in saved]
    assert weights[0].keys() == weights[1].keys() and len(weights[0]) > 10
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name  # DDP keeps replicas bit-identical


def test_sbatch_script_runs_one_srun_task_per_gpu_with_requeue_signal():
    from lightning_lars.parallel.launch import build

    launcher, script = build(
        [
            "--nodes",
            "4",
            "--devices",
            "8",
            "--cpus-per-node",
            "64",
            "recipe=goyal_8k",
            "trainer.max_epochs=2",
        ],
        env={},
        which=lambda name: "/usr/bin/sbatch" if name == "sbatch" else None,
    )
    assert launcher == "slurm"
    for directive in (
        "--nodes=4",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--signal=SIGUSR1@90",
        "--requeue",
    ):
        assert f"#SBATCH {directive}\n" in script
    srun = [line for line in script.splitlines() if line.startswith("srun ")]
    assert (
        len(srun) == 1
        and "recipe=goyal_8k trainer.num_nodes=4 trainer.devices=8 trainer.max_epochs=2" in srun[0]
    )
    result = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr  # valid shell


def test_launcher_choice_without_slurm():
    from lightning_lars.core.errors import UserError
    from lightning_lars.parallel.launch import build

    no_sbatch = lambda name: None
    launcher, command = build(
        ["--nodes", "2", "--devices", "4", "recipe=demo"],
        env={"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "1", "RUN_ID": "r1"},
        which=no_sbatch,
    )
    assert launcher == "torchrun" and command[1:3] == ["-m", "torch.distributed.run"]
    assert {"--nnodes=2", "--nproc-per-node=4", "--node-rank=1", "--master-addr=10.0.0.1"} <= set(command)
    assert command[-1].endswith("runs/torchrun-r1")  # every node writes to the same run dir
    launcher, command = build(["--devices", "2", "recipe=demo"], env={}, which=no_sbatch)
    assert launcher == "local" and command[1:] == [
        "-m",
        "lightning_lars.train",
        "recipe=demo",
        "trainer.num_nodes=1",
        "trainer.devices=2",
    ]
    with pytest.raises(UserError, match="MASTER_ADDR"):
        build(["--nodes", "2", "recipe=demo"], env={}, which=no_sbatch)
