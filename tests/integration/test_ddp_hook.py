"""The grouped all-reduce hook on 2 gloo processes: gradients equal DDP's own all-reduce, training too."""

import os
import socket
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from hydra.utils import instantiate
from lightning.pytorch.strategies import DDPStrategy
from omegaconf import OmegaConf
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from lightning_lars.parallel.bucket_hook import GroupedAllReduceState, compression_error_bound, register

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
WORLD_SIZE = 2  # fp32 exactness holds for 2 ranks: a + b == b + a whatever the chunking of the ring


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def small_net() -> torch.nn.Module:
    """A conv net with BN and 1-18 KiB gradient tensors, so KiB-sized buckets and groups are non-trivial."""
    torch.manual_seed(0)
    layers, width = [], 3
    for out in (8, 16, 16):
        layers += [torch.nn.Conv2d(width, out, 3), torch.nn.BatchNorm2d(out), torch.nn.ReLU()]
        width = out
    layers += [torch.nn.Conv2d(width, 32, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(32, 10))


def compare_gradients(rank: int, port: int) -> None:
    """For each compression: 4 SGD steps of plain DDP and of the hooked DDP side by side, same data."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    for compression in (None, "bf16", "fp16"):
        plain = DistributedDataParallel(small_net(), bucket_cap_mb=0.001)
        hooked = DistributedDataParallel(small_net(), bucket_cap_mb=0.001)
        state = GroupedAllReduceState([0.001, 0.016], compression=compression, compute_grad_norms=True)
        register(hooked, state)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (plain, hooked)]
        generator = torch.Generator().manual_seed(rank)  # different data on each rank
        for step in range(4):
            images = torch.randn(4, 3, 16, 16, generator=generator)
            labels = torch.randint(0, 10, (4,), generator=generator)
            for model, optimizer in zip((plain, hooked), optimizers):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(images), labels).backward()
            for (name, ref), param in zip(plain.named_parameters(), hooked.parameters()):
                where = f"rank {rank} step {step} {name} compression={compression}"
                if compression is None:
                    assert torch.equal(ref.grad, param.grad), where
                else:
                    error = (ref.grad - param.grad).abs().max().item()
                    assert error <= compression_error_bound(compression, ref.grad), where
                norm = state.pop_grad_norm(param)
                assert torch.allclose(norm, param.grad.norm(), rtol=1e-6, atol=0), where
            assert step == 0 or len(state.last_backward_groups) < sum(state.last_backward_groups), "no coalescing"
            if compression is not None:  # keep weights equal so every step compares like with like
                for ref, param in zip(plain.parameters(), hooked.parameters()):
                    param.grad.copy_(ref.grad)
            for optimizer in optimizers:
                optimizer.step()
    dist.destroy_process_group()


def test_hook_gradients_equal_ddp_allreduce_over_steps():
    mp.spawn(compare_gradients, args=(free_port(),), nprocs=WORLD_SIZE, join=True)


class TinyClassifier(L.LightningModule):
    """small_net trained with SGD; logs how many all-reduces the hook launched, if there is a hook."""

    def __init__(self):
        super().__init__()
        self.net = small_net()

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = torch.nn.functional.cross_entropy(self.net(images), labels)
        state = getattr(self.trainer.strategy, "_ddp_comm_state", None)
        if state is not None:
            self.log("hook/num_allreduces", float(state.num_allreduces), reduce_fx="max")
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def train(strategy) -> tuple[dict, dict]:
    """5 steps on 2 spawned CPU processes; returns rank 0's final weights and logged metrics."""
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(80, 3, 16, 16, generator=generator), torch.randint(0, 10, (80,), generator=generator))
    module = TinyClassifier()
    trainer = L.Trainer(
        accelerator="cpu", devices=WORLD_SIZE, strategy=strategy, max_steps=5, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    os.environ["MASTER_PORT"] = str(free_port())
    trainer.fit(module, DataLoader(data, batch_size=8))
    return {k: v.clone() for k, v in module.state_dict().items()}, dict(trainer.callback_metrics)


def test_training_with_hook_matches_training_without():
    cfg = OmegaConf.load(REPO / "conf/strategy/ddp_bucketed.yaml")  # the shipped config, KiB-sized here
    cfg.bucket_cap_mb = 0.001
    cfg.ddp_comm_state.group_caps_mb = [0.001, 0.016]
    hooked = instantiate(cfg, start_method="spawn")
    weights_hooked, metrics = train(hooked)
    weights_plain, _ = train(DDPStrategy(start_method="spawn", bucket_cap_mb=0.001, gradient_as_bucket_view=True))
    assert metrics["hook/num_allreduces"] >= 5  # the hook ran on CPU (stock Lightning: 0 calls)
    assert weights_plain.keys() == weights_hooked.keys()
    for name in weights_plain:
        assert torch.equal(weights_plain[name], weights_hooked[name]), name
    assert not torch.equal(weights_plain["net.0.weight"], small_net().state_dict()["0.weight"])  # it trained
