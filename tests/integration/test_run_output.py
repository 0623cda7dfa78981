"""What a user sees of every run: the run's log in ``train.log``, and no noise lines on the console."""

from __future__ import annotations

import os
import shutil

import pytest
from resume_runs import make_demo_data, run_to_end, train_command

pytestmark = pytest.mark.slow


def test_train_log_holds_the_run_and_the_console_no_noise(tmp_path):
    make_demo_data(tmp_path)
    extra = {}
    # Lightning hints at srun wherever SLURM's srun is on PATH: put one there
    if shutil.which("srun") is None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / "srun").chmod(0o755)
        extra["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    logs = tmp_path / "logs"

    def train(*overrides: str) -> str:
        console = run_to_end(train_command(tmp_path, *overrides), tmp_path, **extra)
        for noise in (
            "srun",
            "Checkpoint directory",
            "Trainable params",
            "| Name",
            "GPU available",
            "TPU available",
        ):
            assert noise not in console, console
        return console

    train("trainer.max_steps=4")  # writes its checkpoint at step 4
    (run_dir,) = (logs / "demo" / "runs").iterdir()
    # resumed, it saves into the checkpoint folder it resumed from, not empty then: still no line about that
    resumed = train("trainer.max_steps=6", f"run.ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}")
    assert f"checkpoints of this resumed run go to {run_dir / 'checkpoints'}" in resumed, resumed[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "[lightning-lars] plan: global batch 32" in log and "[lightning-lars] recipe demo" in log, log[
        -3000:
    ]
    # neither Lightning's model summary nor its device banner, in the file either; the plan line names the devices
    assert "Trainable params" not in log and "GPU available" not in log and "TPU available" not in log, log[
        -3000:
    ]
    assert "[lightning-lars] plan: global batch 32 = 1 device x" in log
    # the W&B run (offline: its files on disk) carries the report image beside its table
    (wandb_run,) = (run_dir / "wandb").glob("offline-run-*")
    images = list((wandb_run / "files" / "media" / "images" / "report").glob("report_png_*.png"))
    assert [image.read_bytes() for image in images] == [(run_dir / "report.png").read_bytes()], images
    assert list((wandb_run / "files" / "media" / "table" / "report").glob("summary_*.table.json"))
