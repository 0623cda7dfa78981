"""FSDP2 through our strategy on 2 gloo processes: LARS steps equal single-process LARS; BN stats averaged."""

import os
import socket

import lightning as L
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, Subset, TensorDataset

from lightning_lars.bn import average_bn_statistics
from lightning_lars.parallel.fsdp import FSDP2Strategy
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.param_groups import param_groups

pytestmark = pytest.mark.slow
WORLD_SIZE, PER_RANK_BATCH, STEPS = 2, 4, 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def net() -> torch.nn.Module:
    """Conv + MLP without BN, so per-rank batches give the same mean gradient as one big batch."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)),
    )


def make_lars(model: torch.nn.Module) -> LARS:
    # A large lr and eta make the trust ratio, hence the norms, dominate the update.
    return LARS(param_groups(model, 1e-4, "ndim<=1"), lr=2.0, momentum=0.9, weight_decay=1e-4,
                trust_coefficient=0.02, form="nvidia")


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    num = WORLD_SIZE * PER_RANK_BATCH * STEPS
    return TensorDataset(torch.randn(num, 3, 10, 10, generator=generator), torch.randint(0, 10, (num,), generator=generator))


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = net()

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return torch.nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        return make_lars(self.net)


def reference_weights() -> dict:
    """Single process: the same samples as one batch of WORLD_SIZE * PER_RANK_BATCH per step."""
    model = net()
    optimizer = make_lars(model)
    for images, labels in DataLoader(dataset(), batch_size=WORLD_SIZE * PER_RANK_BATCH):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    return {f"net.{k}": v for k, v in model.state_dict().items()}


def worker(rank: int, port: int) -> None:
    # LOCAL_RANK set: Lightning treats the processes as started externally (one per rank, as under srun).
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank), NODE_RANK="0",
                      WORLD_SIZE=str(WORLD_SIZE), RANK=str(rank))
    module = Classifier()
    trainer = L.Trainer(accelerator="cpu", devices=WORLD_SIZE, strategy=FSDP2Strategy(), max_steps=STEPS,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=False)
    # Rank r takes samples r, r + 2, ...: per step the ranks together hold one reference batch.
    samples = Subset(dataset(), range(rank, len(dataset()), WORLD_SIZE))
    trainer.fit(module, DataLoader(samples, batch_size=PER_RANK_BATCH))
    params = dict(module.named_parameters())
    assert all(isinstance(p, DTensor) for p in params.values()), "fully_shard did not shard every parameter"
    expected = reference_weights()
    for name, param in params.items():
        full = param.full_tensor()
        assert not torch.equal(full, net().state_dict()[name.removeprefix("net.")]), f"{name} did not train"
        torch.testing.assert_close(full, expected[name], rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"rank {rank} {name}: {m}")

    # BatchNorm running stats differ per rank under FSDP2; the strategy averages them over ranks.
    bn = torch.nn.BatchNorm1d(3)
    bn.running_mean.fill_(float(rank))
    bn.running_var.fill_(1.0 + 2 * rank)
    assert average_bn_statistics(bn, trainer.strategy.device_mesh["data_parallel"].get_group()) == 1
    assert torch.equal(bn.running_mean, torch.full((3,), 0.5)) and torch.equal(bn.running_var, torch.full((3,), 2.0))
    dist.barrier()


def test_fsdp2_lars_matches_single_process_lars():
    mp.spawn(worker, args=(free_port(),), nprocs=WORLD_SIZE, join=True)
