"""A bad Neumann hyperparameter through the real entry point: exit 2, one `error:` line naming the key, no
traceback. The check lives in the optimizer (it runs when Lightning calls configure_optimizers), so this proves
the message survives Lightning's fit loop and train.py's error handling. Cheap: the tiny test_resnet, the
small demo data other integration tests share, no W&B, no training step."""

from __future__ import annotations

import pytest
from helpers import TRAIN, assert_one_line_error, run
from resume_runs import env, make_demo_data

pytestmark = pytest.mark.slow


def test_bad_neumann_value_exits_2_with_one_line(shared_runs, tmp_path):
    make_demo_data(shared_runs)
    done = run(
        [
            *TRAIN,
            "recipe=neumann_32k",
            "debug=toy",
            "model.arch=test_resnet",
            "optimizer.gamma=1.5",
            "~logger",
            f"paths.log_dir={tmp_path / 'logs'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        env=env(shared_runs),
        timeout=600,
    )
    # Lightning's start-up notices may precede it (the trainer is built first); the error ends the run
    line = assert_one_line_error(done, alone=False)
    assert line == "error: Neumann gamma=1.5 must be in [0, 1); set optimizer.gamma"
