"""A bad Neumann hyperparameter through the real entry point: exit 2, one `error:` line naming the key, no
traceback. The check lives in the optimizer (it runs when Lightning calls configure_optimizers), so this proves
the message survives Lightning's fit loop and train.py's error handling. Cheap: the tiny test_resnet, the
small demo data other integration tests share, no W&B, no training step."""

from __future__ import annotations

import subprocess
import sys

import pytest
from resume_runs import ROOT, env, make_demo_data

pytestmark = pytest.mark.slow


def test_bad_neumann_value_exits_2_with_one_line(shared_runs, tmp_path):
    make_demo_data(shared_runs)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_lars.train",
            "recipe=neumann_32k",
            "debug=toy",
            "model.arch=test_resnet",
            "optimizer.gamma=1.5",
            "~logger",
            f"paths.log_dir={tmp_path / 'logs'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        env=env(shared_runs),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    # Lightning's start-up notices may precede it (the trainer is built first); the error ends the run
    assert errors == [done.stderr.strip().splitlines()[-1]]
    assert errors[0] == "error: Neumann gamma=1.5 must be in [0, 1); set optimizer.gamma"
