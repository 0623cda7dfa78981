"""2D-torus and hierarchical all-reduce hooks on real gloo process groups.

4 processes laid out as 2 nodes x 2 devices (``topology_workers.compare``): each step's averaged gradients
equal DDP's own all-reduce and a float64 mean of the ranks' local gradients, within the error bound of fp32
summation; training with each hook equals training without. Then the shipped configs through Lightning on 2
processes, grid taken from the launch: with 2 ranks every summation order gives the same fp32 sum, so the
weights must be bitwise equal.
"""

import os
from unittest import mock

import lightning as L
import pytest
import torch
import torch.multiprocessing as mp
from helpers import free_port, group_config, small_conv_net
from hydra.utils import instantiate
from lightning.pytorch.strategies import DDPStrategy
from topology_workers import DEVICES, NET, NODES, compare
from torch.utils.data import DataLoader, TensorDataset

pytestmark = pytest.mark.slow


def test_hooks_average_like_ddp_and_train_like_ddp_on_a_2x2_grid():
    mp.spawn(compare, args=(free_port(),), nprocs=NODES * DEVICES, join=True)


class TinyClassifier(L.LightningModule):
    """topology_workers' net with SGD; logs the grid the hook ran on, if there is one."""

    def __init__(self):
        super().__init__()
        self.net = small_conv_net(**NET)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        state = getattr(self.trainer.strategy, "_ddp_comm_state", None)
        if getattr(state, "grid", None) is not None:
            self.log("hook/grid_devices", float(state.grid[1]), reduce_fx="max")
        if state is not None:
            self.log("hook/num_allreduces", float(state.num_allreduces), reduce_fx="max")
        return torch.nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class SaveAtEnd(L.Callback):
    """Save a checkpoint in the spawned processes (the parent's trainer holds no optimizer after spawn)."""

    def __init__(self, path):
        self.path = path

    def on_train_end(self, trainer, pl_module):
        trainer.save_checkpoint(self.path)  # every rank takes part: the sharded state is gathered


def fit(strategy, checkpoint=None) -> tuple[dict, dict]:
    """4 steps on 2 spawned CPU processes; rank 0's final weights and metrics; saves ``checkpoint`` if given."""
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(64, 3, 12, 12, generator=generator), torch.randint(0, 10, (64,), generator=generator)
    )
    module = TinyClassifier()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[SaveAtEnd(checkpoint)] if checkpoint else None,
    )
    with mock.patch.dict(os.environ, MASTER_PORT=str(free_port())):  # the module fixture's fit too
        trainer.fit(module, DataLoader(data, batch_size=8))
    return {k: v.clone() for k, v in module.state_dict().items()}, dict(trainer.callback_metrics)


@pytest.fixture(scope="module")
def plain_weights():
    return fit(DDPStrategy(start_method="spawn", bucket_cap_mb=0.001, gradient_as_bucket_view=True))[0]


@pytest.mark.parametrize("config", ["ddp_torus2d", "ddp_hierarchical"])
def test_shipped_config_trains_like_plain_ddp_with_grid_from_the_launch(config, plain_weights):
    cfg = group_config("strategy", config)
    cfg.bucket_cap_mb = 0.001
    cfg.ddp_comm_state.group_caps_mb = [0.001, 0.016]
    weights, metrics = fit(instantiate(cfg, start_method="spawn"))
    assert metrics["hook/grid_devices"] == 2  # 1 node x 2 devices, from the Trainer
    assert metrics["hook/num_allreduces"] >= 4  # registered on CPU, where stock Lightning ignores hooks
    for name in plain_weights:
        assert torch.equal(plain_weights[name], weights[name]), name


def test_optimizer_sharding_option_trains_like_plain_ddp_and_saves_the_full_state(plain_weights, tmp_path):
    cfg = group_config("strategy", "ddp_bucketed")
    cfg.bucket_cap_mb = 0.001
    cfg.ddp_comm_state.group_caps_mb = [0.001, 0.016]
    cfg.optimizer_sharding = True
    weights, _ = fit(instantiate(cfg, start_method="spawn"), tmp_path / "sharded.ckpt")
    for name in plain_weights:  # SGD steps each tensor on its own: sharding changes nothing
        assert torch.equal(plain_weights[name], weights[name]), name
    (saved,) = torch.load(tmp_path / "sharded.ckpt", weights_only=False)["optimizer_states"]
    assert len(saved["state"]) == len(plain_weights) - 3 * 3  # a momentum buffer for every parameter
