"""SIGKILL in the middle of an epoch, resume with run.ckpt_path=last, and the run ends bitwise where
an unbroken run ends: weights, optimizer state and metrics, in the same W&B run. Real entry point, CPU."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
import torch
from resume_runs import ROOT, assert_same_training, env, reference_run, run_to_end, train_command

pytestmark = pytest.mark.slow


def kill_when(path, process, timeout_s=600):
    """SIGKILL ``process`` as soon as ``path`` exists (it is written atomically: complete when it appears)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()


def test_sigkill_mid_epoch_then_resume_matches_unbroken_run(shared_runs, tmp_path):
    reference = reference_run(shared_runs)
    run_dir = tmp_path / "run"
    command = train_command(shared_runs, f"hydra.run.dir={run_dir}")
    with open(tmp_path / "killed.log", "w") as log:
        victim = subprocess.Popen(
            command, cwd=ROOT, env=env(shared_runs), stdout=log, stderr=subprocess.STDOUT
        )
        # step 8 is the 2nd of 6 steps of epoch 2: the kill lands mid-epoch, after that checkpoint
        kill_when(run_dir / "checkpoints" / "epoch1-step8.ckpt", victim)
    assert victim.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    assert not (run_dir / "final.pt").exists()  # it really died before the end
    saved = torch.load(run_dir / "checkpoints" / "epoch1-step8.ckpt", weights_only=True)
    assert saved["FFCVDataModule"] == {"epoch": 1, "samples_consumed": 64}  # 2 of 6 global batches of epoch 2
    killed_wandb = {p.name.rsplit("-", 1)[-1] for p in (run_dir / "wandb").glob("offline-run-*")}

    output = run_to_end([*command, "run.ckpt_path=last"], shared_runs)
    assert "Restoring states from the checkpoint path at" in output
    assert_same_training(torch.load(run_dir / "final.pt", weights_only=False), reference)
    # the resumed process logged into the W&B run the killed one started
    run_ids = {p.name.rsplit("-", 1)[-1] for p in (run_dir / "wandb").glob("offline-run-*")}
    assert len(killed_wandb) == 1 and run_ids == killed_wandb, (killed_wandb, run_ids)


def test_an_image_folder_run_resumes_mid_epoch_exactly(shared_runs, tmp_path):
    """The torchvision loader (data=demo_imagefolder: the demo's JPEGs): killed after step 8, 2 of epoch 2's 6
    steps, it resumes with the epoch's remaining samples and their own crops and flips, so it ends bitwise where
    the unbroken run ends, and Lightning has no "not resumable" warning to give."""
    reference_run(shared_runs)  # makes the demo data (JPEGs and FFCV files) once per session
    folder = ["data=demo_imagefolder"]
    reference_dir = shared_runs / "reference_imagefolder"
    if not (reference_dir / "final.pt").is_file():
        run_to_end(train_command(shared_runs, *folder, f"hydra.run.dir={reference_dir}"), shared_runs)
    reference = torch.load(reference_dir / "final.pt", weights_only=False)

    run_dir = tmp_path / "run"
    command = train_command(shared_runs, *folder, f"hydra.run.dir={run_dir}")
    with open(tmp_path / "killed.log", "w") as log:
        victim = subprocess.Popen(
            command, cwd=ROOT, env=env(shared_runs), stdout=log, stderr=subprocess.STDOUT
        )
        kill_when(run_dir / "checkpoints" / "epoch1-step8.ckpt", victim)
    assert victim.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    saved = torch.load(run_dir / "checkpoints" / "epoch1-step8.ckpt", weights_only=True)
    # Lightning's own record of the loader's state (its stateful-dataloader protocol): 2 of 6 global batches
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [
        {"epoch": 1, "samples_consumed": 64}
    ]

    output = run_to_end([*command, "run.ckpt_path=last"], shared_runs)
    assert "Restoring states from the checkpoint path at" in output
    assert "not resumable" not in output, output[-3000:]
    assert_same_training(torch.load(run_dir / "final.pt", weights_only=False), reference)
