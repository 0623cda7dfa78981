"""The demo pipeline as a user runs it, at reduced size: generate -> prepare -> train -> offline W&B run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def run(args, env_extra, timeout=600):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **env_extra}
    env.pop("WANDB_MODE", None)  # no credentials and no mode: the logger must choose offline by itself
    env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_generate_prepare_train_and_log_offline(tmp_path):
    data_dir, logs = tmp_path / "data", tmp_path / "logs"
    env = {"LARS_DATA_DIR": str(data_dir), "HOME": str(tmp_path)}  # HOME: no ~/.netrc credentials
    made = run(["-m", "lightning_lars.data.demo", "--out", str(data_dir / "demo"), "--train-per-class", "16",
                "--val-per-class", "8", "--workers", "1"], env)
    assert made.returncode == 0, made.stderr[-2000:]
    assert (data_dir / "demo" / "train.beton").is_file() and (data_dir / "demo" / "val.beton").is_file()

    trained = run(["-m", "lightning_lars.train", "recipe=demo", f"paths.log_dir={logs}", "batch.global_size=32",
                   "batch.max_per_device=16", "trainer.max_epochs=2", "+trainer.limit_val_batches=2",
                   "+trainer.enable_progress_bar=false"], env)
    out = trained.stdout + trained.stderr
    assert trained.returncode == 0, out[-3000:]
    assert "W&B: offline (no credentials configured)" in out
    assert "plan: global batch 32 = 1 devices x 16 images x 2 accumulation steps; 5 steps/epoch" in out
    assert "Results: recipe demo" in out and "top-1 (val)" in out and "images/s" in out

    runs = list(logs.glob("demo/runs/*/wandb/offline-run-*"))
    assert len(runs) == 1, runs
    summary = json.loads((runs[0] / "files" / "wandb-summary.json").read_text())
    assert 0.0 <= summary["final/val/top1"] <= 1.0
    assert summary["trainer/global_step"] == 10  # 2 epochs x 5 optimizer steps (80 images // 32 per step)
    assert "train/lr" in summary and summary["final/time/wall_s"] > 0
    logged_config = (runs[0] / "files" / "config.yaml").read_text()
    for recorded in ("git_sha", "git_dirty", "lightning", "timm", "ffcv", "peak_lr", "recipe_name"):
        assert recorded in logged_config, recorded
