"""The run report end to end through the real entry point: results.json, offline W&B tables and plots,
progress lines in a log, and a diverged run that ends in one line."""

import json
import math
import sys
from pathlib import Path

import pytest
import yaml
from helpers import run
from PIL import Image

from lightning_lars.config.paths import RECIPES_DIR

pytestmark = pytest.mark.slow


def _table(run_dir: Path, key: str) -> dict:
    """The offline W&B run's logged table ``report/<key>`` (W&B writes each table as JSON under media/)."""
    (path,) = run_dir.glob(f"wandb/offline-run-*/files/media/table/report/{key}_*.table.json")
    return json.loads(path.read_text())


def test_report_results_json_and_wandb_tables(data_dir, tmp_path):
    # 160 images / 64 per step = 2 steps per epoch; 4 steps = 2 epochs with an eval after each.
    out = tmp_path / "run"
    trained = run(
        [
            sys.executable,
            "-m",
            "lightning_lars.train",
            "recipe=demo",
            "debug=toy",
            f"paths.data_dir={data_dir}",
            f"hydra.run.dir={out}",
            "trainer.max_steps=4",
            "trainer.max_epochs=2",
            "trainer.log_every_n_steps=1",
            "callbacks.trust_ratio.every_n_steps=1",
            "callbacks.time_to_target.target_top1=99.9",
            "deviations=[{technique: 'BN span', published: '32', ours: '16', why: 'toy'}]",
        ]
    )
    log = trained.stdout + trained.stderr
    assert trained.returncode == 0, log[-3000:]
    assert "Results: recipe demo" in log and "time to 99.9 % top-1" in log
    # not a TTY: lines
    assert "[train] epoch 2.00/2 step 4/4 (100.0%)" in log and "[val] epoch 1 step 2" in log
    # no library noise (W&B's anonymous-mode warning, torch's pytree deprecation through Lightning,
    # Lightning's weights_only notice, its untrue "validation will run after every batch")
    for noise in ("anonymous", "LeafSpec", "weights_only", "validation will run after every batch"):
        assert noise not in log, noise

    assert f"Report: {out / 'report.png'}" in log  # the picture, named where the user looks
    with Image.open(out / "report.png") as picture:  # a real PNG: the six panels at 16 x 9 in, 90 dpi
        assert picture.format == "PNG" and picture.size == (1440, 810)

    record = json.loads((out / "results.json").read_text())
    assert record["steps"] == 4 and record["recipe"] == "demo" and record["published"]["hardware"]
    assert [e["epoch"] for e in record["evals"]] == pytest.approx([1.0, 2.0])
    assert [e["step"] for e in record["evals"]] == [2, 4]
    final_top1 = record["metrics"]["val/top1"]
    assert record["evals"][-1]["top1"] == pytest.approx(100 * final_top1)
    assert record["metrics"]["target/target_top1"] == 99.9 and record["metrics"]["perf/images_per_sec"] > 0

    summary = {row[0]: row[1:] for row in _table(out, "summary")["data"]}
    assert summary["top-1 (val)"][0] == f"{100 * final_top1:.2f} %"
    published_batch = str(
        yaml.safe_load((RECIPES_DIR / "demo.yaml").read_text())["published"]["global_batch"]
    )
    assert summary["global batch"] == ["64", published_batch]  # this run beside the recipe's published value

    deviations = _table(out, "deviations")  # the recipe's deviations, beside the summary
    assert deviations["columns"] == ["technique", "published", "ours", "why"]
    assert deviations["data"] == [["BN span", "32", "16", "toy"]]
    assert "BN span: published 32; ours 16 (toy)" in log and record["deviations"][0]["why"] == "toy"

    lr = _table(out, "lr_schedule_table")
    planned = {step: value for step, value, kind in lr["data"] if kind == "planned"}
    applied = {step: value for step, value, kind in lr["data"] if kind == "applied"}
    assert sorted(applied) == [0, 1, 2, 3]
    for step, value in applied.items():  # what the optimizer used is the schedule function's value
        assert value == pytest.approx(planned[step], rel=1e-6)

    top1 = _table(out, "top1_vs_epoch_table")
    assert [row[0] for row in top1["data"]] == pytest.approx([1.0, 2.0])
    trust = _table(out, "trust_ratio_quantiles_table")
    assert sorted({row[0] for row in trust["data"]}) == [0, 1, 2, 3]
    assert {row[1] for row in trust["data"]} == {"min", "p25", "median", "p75", "max"}
    per_layer = _table(out, "trust_ratio_per_layer_table")
    assert per_layer["columns"] == ["layer", "w_norm", "g_norm", "trust_ratio"]
    assert all(math.isfinite(row[3]) and row[3] > 0 for row in per_layer["data"])


def test_a_diverged_run_ends_in_one_line_naming_the_step(data_dir, tmp_path):
    out = tmp_path / "run"
    diverged = run(
        [
            sys.executable,
            "-m",
            "lightning_lars.train",
            "recipe=demo",
            "debug=toy",
            f"paths.data_dir={data_dir}",
            f"hydra.run.dir={out}",
            "scheduler.base_lr=1e30",
            "scheduler.warmup_epochs=0",
            "callbacks.divergence.check_every_n_steps=1",
        ]
    )
    assert diverged.returncode == 2, (diverged.stdout + diverged.stderr)[-3000:]
    errors = [ln for ln in diverged.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: training diverged at step "), diverged.stderr[
        -3000:
    ]
    assert "loss is nan" in errors[0] or "weights are NaN/inf" in errors[0]
    assert "Traceback" not in diverged.stderr
    assert not list(out.glob("checkpoints/*.ckpt"))  # nothing written from the diverged state
