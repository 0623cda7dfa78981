"""Shared by the resume and preemption tests: a tiny deterministic training run through the real entry point.

12 optimizer steps over 2 epochs (200 demo images, global batch 32 = 2 micro-batches of 16), timm's 0.4 M
parameter ``test_resnet``, a checkpoint every 4 steps. The train pipeline is the ImageNet recipes' random ops
(random resized crop and flip, seeded per (seed, epoch, sample index) by ``lightning_lars.data.seeded_ops``),
set here rather than taken from the demo config, whose augmentation is tuned for accuracy: a resumed run must
repeat the augmentation too. Everything else (order, LARS, schedule, BN, metrics) is the real recipe code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import helpers
import lightning as L
import torch

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
STEPS_PER_EPOCH, EPOCHS, CHECKPOINT_EVERY = 6, 2, 4

OVERRIDES = [
    "recipe=demo",
    "model.arch=test_resnet",
    "batch.global_size=32",
    "batch.max_per_device=16",
    f"trainer.max_epochs={EPOCHS}",
    "trainer.deterministic=true",
    "trainer.log_every_n_steps=1",
    "data.num_workers=1",
    "data.pipeline.train=[random_resized_crop,flip,{normalize:imagenet},to_tensor,to_device,to_torch_image]",
    f"callbacks.checkpoint.every_n_train_steps={CHECKPOINT_EVERY}",
    "callbacks.checkpoint.every_n_epochs=null",
    "+callbacks.final_state._target_=resume_runs.FinalState",
]


class FinalState(L.Callback):
    """Writes the final weights, optimizer state and metrics to ``<run dir>/final.pt`` when fit ends."""

    def on_fit_end(self, trainer, pl_module):
        torch.save(
            {
                "state_dict": pl_module.state_dict(),
                "optimizer": trainer.optimizers[0].state_dict(),
                "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
                "global_step": trainer.global_step,
            },
            Path(trainer.default_root_dir) / "final.pt",
        )


def env(tmp: Path, **extra: str) -> dict[str, str]:
    """The subprocess environment (``helpers.entry_point_env``: this checkout and the test helpers importable,
    offline W&B, no SLURM) with this folder importable and ``tmp``'s data as ``LARS_DATA_DIR``."""
    return helpers.entry_point_env(HERE, LARS_DATA_DIR=str(tmp / "data"), **extra)


def train_command(tmp: Path, *extra: str) -> list[str]:
    return [*helpers.TRAIN, *OVERRIDES, f"paths.log_dir={tmp / 'logs'}", *extra]


def entry_point(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    """``python -m lightning_lars.train paths.log_dir=<tmp>/logs ARGS`` on ``tmp``'s data, run to its end."""
    return helpers.run([*helpers.TRAIN, f"paths.log_dir={tmp / 'logs'}", *args], env=env(tmp), timeout=600)


def run_to_end(command: list[str], tmp: Path, timeout: float = 600, **env_extra: str) -> str:
    """Runs ``command`` from the checkout in `env` (``tmp``'s data, offline W&B) and asserts it exits 0; its
    console (stdout, then stderr)."""
    done = helpers.run(command, env=env(tmp, **env_extra), timeout=timeout)
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-3000:]
    return console


def make_demo_data(tmp: Path, val_per_class: int = 5) -> None:
    """The demo dataset at 20 train and ``val_per_class`` val images a class in ``tmp/data``, unless there."""
    helpers.make_demo_data(tmp / "data", train_per_class=20, val_per_class=val_per_class, env=env(tmp))


def reference_run(tmp: Path) -> dict:
    """The unbroken run (made once per test session under ``tmp``): its ``final.pt`` contents."""
    make_demo_data(tmp)
    run_dir = tmp / "reference"
    if not (run_dir / "final.pt").is_file():
        run_to_end(train_command(tmp, f"hydra.run.dir={run_dir}"), tmp)
    return torch.load(run_dir / "final.pt", weights_only=False)


def assert_same_training(resumed: dict, reference: dict) -> None:
    """Bitwise: every weight and buffer, every optimizer state tensor, every metric except wall-clock rates."""
    assert resumed["global_step"] == reference["global_step"] == STEPS_PER_EPOCH * EPOCHS
    assert resumed["state_dict"].keys() == reference["state_dict"].keys()
    for name, tensor in reference["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], tensor), name
    for index, state in reference["optimizer"]["state"].items():
        for key, value in state.items():
            other = resumed["optimizer"]["state"][index][key]
            assert torch.equal(other, value) if torch.is_tensor(value) else other == value, (index, key)
    timing = ("perf/", "time/")
    expected = {k: v for k, v in reference["metrics"].items() if not k.startswith(timing)}
    got = {k: v for k, v in resumed["metrics"].items() if not k.startswith(timing)}
    assert {"train/loss_epoch", "train/top1", "val/loss", "val/top1", "val/top5"} <= expected.keys()
    assert got == expected
