"""``trainer.max_steps=N`` on a real recipe through the entry point, as a user smoke-tests one: it starts even
though the recipe's first evaluation comes after step N, says once that it stops early, shows epochs of the
full run and evaluates at step N. The plan's own numbers are checked in tests/unit/test_short_run.py."""

from __future__ import annotations

import json
import sys

import pytest
from resume_runs import make_demo_data, run_to_end

pytestmark = pytest.mark.slow


def test_a_short_run_starts_says_so_once_and_evaluates_at_its_last_step(tmp_path):
    make_demo_data(tmp_path)  # 200 train images: the demo's batch of 128 makes 1 step per epoch, 8 epochs
    out = tmp_path / "run"
    output = run_to_end(
        [
            sys.executable,
            "-m",
            "lightning_lars.train",
            "recipe=demo",
            "data=demo_imagefolder",
            "model.arch=test_resnet",
            "evaluation.offset_epochs=5",  # the first evaluation after epoch 6 (step 6): past the short run
            "trainer.max_steps=3",
            "trainer.log_every_n_steps=1",
            "trainer.limit_val_batches=1",
            "~logger",
            f"hydra.run.dir={out}",
        ],
        tmp_path,
        timeout=900,
    )
    early = [line for line in output.splitlines() if "stops early" in line]
    assert len(early) == 1 and "plan: stops early after step 3 of 8 (trainer.max_steps, 3 epochs)" in early[0]
    assert "8 steps = 8 epochs" in output  # the plan names the full run
    assert "[train] epoch 1.00/8 step 1/3" in output  # progress: epochs of the full run, steps of this one
    assert "[val] epoch 3 step 3 |" in output
    assert "prepend your python command with `srun`" not in output  # Lightning's hint where srun is on PATH
    record = json.loads((out / "results.json").read_text())
    assert record["steps"] == 3 and [(e["step"], e["epoch"]) for e in record["evals"]] == [(3, 3.0)]
