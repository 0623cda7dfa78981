"""The demo pipeline as a user runs it, at reduced size: generate -> prepare -> train -> offline W&B run."""

import sys

import pytest
from helpers import entry_point_env, make_demo_data, run

pytestmark = [pytest.mark.slow, pytest.mark.demo]  # make test runs it, make test-slow does not


def test_generate_prepare_train_and_log_offline(tmp_path):
    data_dir, logs = tmp_path / "data", tmp_path / "logs"
    # no credentials (HOME: no ~/.netrc) and no W&B mode: the logger must choose offline by itself
    env = entry_point_env(
        unset=("WANDB_MODE", "WANDB_API_KEY"), LARS_DATA_DIR=str(data_dir), HOME=str(tmp_path)
    )
    make_demo_data(data_dir, env=env)
    assert (data_dir / "demo" / "train.beton").is_file() and (data_dir / "demo" / "val.beton").is_file()

    trained = run(
        [
            sys.executable,
            "-m",
            "lightning_lars.train",
            "recipe=demo",
            f"paths.log_dir={logs}",
            "batch.global_size=32",
            "batch.max_per_device=16",
            "trainer.max_epochs=2",
            "trainer.limit_val_batches=2",
        ],
        env=env,
    )  # a Trainer argument the demo does not set: no + needed
    out = trained.stdout + trained.stderr
    assert trained.returncode == 0, out[-3000:]
    assert "W&B: offline (no credentials configured)" in out
    assert "plan: global batch 32 = 1 device x 16 images x 2 accumulation steps" in out
    assert "plan: 5 steps/epoch (drop_last: 160 // 32); 10 steps = 2 epochs;" in out and "peak LR" in out
    assert "Results: recipe demo" in out and "top-1 (val)" in out and "images/s" in out

    runs = list(logs.glob("demo/runs/*/wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 1, runs
    # wandb 0.31 keeps an offline run as one binary record log (what `wandb sync` uploads); its protobuf
    # records carry the metric and config keys as plain UTF-8, so their presence proves what was logged.
    record_log = runs[0].read_bytes()
    for logged in (
        b"final/val/top1",
        b"final/time/wall_s",
        b"train/lr",
        b"val/top1",
        b"perf/images_per_sec",
        b"git_sha",
        b"git_dirty",
        b"peak_lr",
        b"steps_per_epoch",
        b"timm",
        b"ffcv",
    ):
        assert logged in record_log, logged
