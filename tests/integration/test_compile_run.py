"""``model.compile=default`` through the real entry point: the demo at toy scale, 2 steps on CPU, compiled by
torch's inductor (the oracle that it compiled: inductor's own cache folder fills)."""

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_a_compiled_toy_run_finishes(tmp_path):
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_lars.data.demo",
            "--out",
            str(tmp_path / "data" / "demo"),
            "--train-per-class",
            "20",
            "--val-per-class",
            "4",
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    cache = tmp_path / "inductor"
    env = {**os.environ, "WANDB_MODE": "offline", "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_lars.train",
            "recipe=demo",
            "debug=toy",
            "model.compile=default",
            "trainer.max_steps=2",
            "data.resolution=16",
            "trainer.limit_val_batches=1",
            "~logger",
            f"paths.data_dir={tmp_path / 'data'}",
            f"paths.log_dir={tmp_path / 'logs'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert re.search(r"optimizer steps +2 ", out), out[-3000:]
    assert list((tmp_path / "logs").glob("**/results.json"))
    assert any(cache.rglob("*.py")), "inductor wrote no kernels: the model ran eager"
