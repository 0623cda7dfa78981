"""Two "nodes" on one machine: the real entry point, the demo recipe, our hooked DDP; all ranks agree."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
NUM_NODES = 2


class SaveWeightsPerRank(L.Callback):
    """Writes every rank's final weights (DDP checkpoints hold rank 0's only), for the test to compare."""

    def __init__(self, out_dir: str):
        self.out_dir = Path(out_dir)

    def on_train_end(self, trainer, pl_module):
        torch.save({"weights": pl_module.state_dict(), "global_step": trainer.global_step},
                   self.out_dir / f"rank{trainer.global_rank}.pt")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(not (REPO / "data/demo/train.beton").exists(), reason="needs the demo data: make demo-data")
def test_two_node_launch_trains_the_demo_recipe_and_ranks_end_equal(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k not in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK")}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(NUM_NODES),
               WANDB_MODE="offline", PYTHONPATH=os.pathsep.join([str(REPO), str(Path(__file__).parent)]))
    command = [
        # debug=toy: 3 steps of global batch 64 on CPU (32 images per "node")
        sys.executable, "-m", "lightning_lars.train", "recipe=demo", "debug=toy", f"trainer.num_nodes={NUM_NODES}",
        "trainer.devices=1", "trainer.accelerator=cpu", "strategy=ddp_bucketed", "strategy.bucket_cap_mb=0.25", "strategy.ddp_comm_state.group_caps_mb=[0.25,1,4]",
        "+callbacks.save_weights._target_=test_two_nodes.SaveWeightsPerRank",
        f"+callbacks.save_weights.out_dir={tmp_path}", "logger.mode=offline",
        f"hydra.run.dir={tmp_path}/run",  # one run dir for both "nodes"
    ]
    nodes = [subprocess.Popen(command, cwd=REPO, env={**env, "NODE_RANK": str(rank)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in range(NUM_NODES)]
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
