"""strategy=fsdp2 saves distributed checkpoints (a directory of shards per checkpoint); run.ckpt_path=last finds
the newest, the run continues from its step and logs into the same W&B run. Two gloo ranks, real Lightning
ModelCheckpoint, real WandbLogger (offline), our ResumeState and resume.py."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.multiprocessing as mp
from helpers import free_port
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger
from omegaconf import OmegaConf
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_lars.optim.lars import LARS
from lightning_lars.optim.param_groups import param_groups
from lightning_lars.parallel.fsdp import FSDP2Strategy
from lightning_lars.runtime import resume
from lightning_lars.runtime.checkpointing import ResumeState

pytestmark = pytest.mark.slow
WORLD = 2


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 5, bias=False), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return LARS(param_groups(self.net, 1e-4), lr=0.1, momentum=0.9, weight_decay=1e-4)


class CountBatches(L.Callback):
    def __init__(self):
        self.num_batches = 0

    def on_train_batch_end(self, *args) -> None:
        self.num_batches += 1


def fit(run_dir: Path, max_steps: int, ckpt_path: str | None, logger_kwargs: dict) -> tuple[int, WandbLogger]:
    """Train to ``max_steps``; returns the number of batches this fit ran and its logger."""
    logger = WandbLogger(save_dir=str(run_dir), offline=True, **logger_kwargs)
    checkpoints = ModelCheckpoint(dirpath=run_dir / "checkpoints", every_n_train_steps=2, save_top_k=-1)
    counter = CountBatches()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy=FSDP2Strategy(),
        max_steps=max_steps,
        logger=logger,
        callbacks=[checkpoints, ResumeState(), counter],
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=run_dir,
        use_distributed_sampler=False,
    )
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(64, 6, generator=generator), torch.randint(0, 3, (64,), generator=generator)
    )
    trainer.fit(Module(), DataLoader(data, batch_size=4), ckpt_path=ckpt_path)
    assert trainer.global_step == max_steps
    return counter.num_batches, logger


def worker(rank: int, port: int, run_dir: Path, queue) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
        WORLD_SIZE=str(WORLD),
        RANK=str(rank),
    )
    _, first_logger = fit(run_dir, 4, None, {})
    cfg = OmegaConf.create(
        {
            "run": {"ckpt_path": "last"},
            "recipe_name": "demo",
            "paths": {"output_dir": str(run_dir), "log_dir": str(run_dir.parent / "logs")},
            "logger": {"_target_": "lightning.pytorch.loggers.WandbLogger"},
        }
    )
    found = resume.resolve_ckpt_path(cfg)  # every rank resolves it, as every rank runs train.py
    kwargs = resume.logger_kwargs(cfg, found)
    num_batches, second_logger = fit(run_dir, 6, found, kwargs)
    queue.put(
        (
            rank,
            {
                "found": found,
                "kwargs": kwargs,
                "first_id": first_logger.version,
                "second_id": second_logger.version,
                "num_batches": num_batches,
            },
        )
    )


def test_last_finds_the_distributed_checkpoint_and_continues_the_wandb_run(tmp_path):
    run_dir = tmp_path / "run"
    queue = mp.get_context("spawn").Queue()
    mp.spawn(worker, args=(free_port(), run_dir, queue), nprocs=WORLD, join=True)
    results = dict(queue.get(timeout=10) for _ in range(WORLD))
    newest = run_dir / "checkpoints" / "epoch=0-step=4.ckpt"
    assert newest.is_dir() and (newest / resume.SHARDED_META).is_file()  # what Lightning really wrote
    for rank, result in results.items():
        assert result["found"] == str(newest), (rank, result["found"])
        assert result["num_batches"] == 2, rank  # steps 5 and 6: continued from step 4, not from scratch
    run_id = results[0]["first_id"]
    assert run_id and results[0]["kwargs"] == {"id": run_id, "resume": "allow"}
    assert results[0]["second_id"] == run_id
    # an interrupted save (shards without meta.pt) is skipped for the complete one before it
    latest = run_dir / "checkpoints" / "epoch=0-step=6.ckpt"
    (latest / resume.SHARDED_META).unlink()
    assert resume.newest_good([run_dir / "checkpoints"]) == newest
