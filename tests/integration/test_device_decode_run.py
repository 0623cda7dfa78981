"""`debug=toy` with the demo's JPEGs decoded by the device path (``data.decode=device``) through the real entry
point on a CPU: the path a GPU job selects, run end to end where only the nvJPEG call differs (~70 s here)."""

from __future__ import annotations

import json
import math

import pytest
from helpers import TRAIN, entry_point_env, run

pytestmark = pytest.mark.slow


def test_a_toy_run_trains_on_device_decoded_batches_and_says_where_they_decode(data_dir, tmp_path):
    env = entry_point_env(LARS_DATA_DIR=str(data_dir))
    overrides = ["recipe=demo", "debug=toy", "data=demo_imagefolder", "data.decode=device"]
    done = run([*TRAIN, *overrides, f"hydra.run.dir={tmp_path}/run"], env=env, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    # without CUDA the same code decodes on the CPU: said once, not an error
    assert output.count("data.decode=device on a cpu device: batches decode on the CPU") == 1, output[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["steps"] == 3
    assert math.isfinite(results["metrics"]["train/loss"]) and math.isfinite(results["metrics"]["val/loss"])
