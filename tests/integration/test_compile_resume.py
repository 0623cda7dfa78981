"""Exact resume with ``model.compile=default``: SIGKILL mid-epoch, resume with run.ckpt_path=last, and every
loss after the checkpoint, the final weights, optimizer state and metrics equal an unbroken compiled run's,
bitwise. The resumed process compiles afresh (a new process), so this also shows that compiling again
computes what the first compile computed. Oracle: the unbroken run (resume_runs.py's run, compiled)."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
import torch
from compile_runs import losses
from resume_runs import ROOT, assert_same_training, env, make_demo_data, train_command

pytestmark = pytest.mark.slow

COMPILED = ["model.compile=default", "+callbacks.loss_history._target_=compile_runs.LossHistory"]


def test_a_compiled_run_resumed_after_sigkill_matches_the_unbroken_compiled_run(tmp_path):
    make_demo_data(tmp_path)
    environment = env(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    reference_dir, run_dir = tmp_path / "reference", tmp_path / "run"
    unbroken = subprocess.run(
        train_command(tmp_path, *COMPILED, f"hydra.run.dir={reference_dir}"),
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert unbroken.returncode == 0, (unbroken.stdout + unbroken.stderr)[-3000:]

    command = train_command(tmp_path, *COMPILED, f"hydra.run.dir={run_dir}")
    checkpoint = run_dir / "checkpoints" / "epoch1-step8.ckpt"  # mid epoch 2 (6 steps per epoch)
    with open(tmp_path / "killed.log", "w") as log:
        victim = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 1800
        while not checkpoint.exists() and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    assert victim.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    assert not (run_dir / "final.pt").exists()

    resumed = subprocess.run(
        [*command, "run.ckpt_path=last"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert "Restoring states from the checkpoint path at" in resumed.stdout + resumed.stderr
    want, got = losses(reference_dir), losses(run_dir)
    assert got.keys() == want.keys() and max(step for step, _ in got) >= 11  # every micro-batch, to the end
    assert got == want  # bitwise: the resumed steps' losses are the unbroken run's
    assert_same_training(
        torch.load(run_dir / "final.pt", weights_only=False),
        torch.load(reference_dir / "final.pt", weights_only=False),
    )
