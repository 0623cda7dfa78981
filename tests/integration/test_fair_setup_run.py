"""benchmarks/fair_setup.sh driven by a plan file end to end, on a small generated data set: its cells run in
the plan's order through the real bench, a tuning trial's row goes to the tuning file (held-out images, LR scale
recorded), the tuned cell runs at the scale the trial chose, every row says how it ran, and a second call
trains nothing."""

import json
import sys

import pytest
from helpers import ROOT, entry_point_env, run

from lightning_lars.data.demo import prepare_demo
from lightning_lars.report import fair_report, plan

PLAN = """
[setup]
width = "quarter"
epochs = 1
resolution = 16
[decision]
[planned]
default = 1
[[cell]]
stage = "first"
arms = "sgd_small"
seeds = 1
ratio = 0.25
lr_rule = "sqrt"
[[cell]]
stage = "sqrt-sgd"
arms = "sgd_sqrt"
seeds = 1
ratio = 0.25
lr_rule = "sqrt"
[tuning]
holdout = 0.1
holdout_seed = 0
lr_scales = [2.0]
trial_seeds = 1
[[tune]]
arms = "sgd_sqrt"
ratio = 0.25
lr_rule = "sqrt"
[[cell]]
stage = "one-point"
arms = "sgd_sqrt"
seeds = 1
ratio = 0.25
lr_rule = "sqrt"
tuned = true
"""


@pytest.mark.slow
def test_the_plan_drives_the_bench_and_tuning_rows_go_apart(tmp_path):
    data = tmp_path / "shapes"
    prepare_demo(data, num_classes=4, train_per_class=100, val_per_class=10, num_workers=1, progress=False)
    (tmp_path / "plan.toml").write_text(PLAN)
    runs, tuning = tmp_path / "runs-fair.jsonl", tmp_path / "runs-tuning.jsonl"
    env = entry_point_env(PLAN=str(tmp_path / "plan.toml"), PYTHON=sys.executable)
    first = run(["bash", ROOT / "benchmarks" / "fair_setup.sh", data, runs], env=env, timeout=1200)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = [json.loads(line) for line in runs.read_text().splitlines()]
    assert [(r["arm"], r["batch"], r["seed"]) for r in rows] == [
        ("sgd_small", 64, 0), ("sgd_sqrt", 100, 0), ("sgd_sqrt", 100, 0)
    ]  # fmt: skip
    assert rows[2]["factors"]["lr_scale"] == 2.0  # the tuned cell: at the scale its one trial chose
    for row in rows:
        assert row["factors"]["compile"] == "eager" and row["factors"]["workers"] == 1
        assert "holdout" not in row["factors"] and len(row["top1_per_epoch"]) == 1
    (trial,) = [json.loads(line) for line in tuning.read_text().splitlines()]
    assert trial["arm"] == "sgd_sqrt" and trial["factors"]["lr_scale"] == 2.0
    assert trial["factors"]["holdout"]["share"] == 0.1 and "+data.holdout=0.1" in trial["overrides"]
    assert "epoch_length.num_train_images=360" in trial["overrides"]  # 40 of 400 held out
    the_plan = plan.load(tmp_path / "plan.toml")
    assert fair_report.tuning_lines([trial], the_plan)[0].endswith("; chosen: x2")
    again = run(["bash", ROOT / "benchmarks" / "fair_setup.sh", data, runs], env=env, timeout=600)
    assert again.returncode == 0 and again.stdout.count(": kept from") == 4, again.stdout[-2000:]
