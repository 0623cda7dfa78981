"""`debug=toy` with the demo's JPEGs decoded by the device path (``data.decode=device``) through the real entry
point on a CPU: the path a GPU job selects, run end to end where only the nvJPEG call differs (~70 s a run here).
The demo's JPEGs are 32 px, the toy's resolution, so the resize is the identity and both paths feed the same
pixels (libjpeg-turbo decodes for PIL and torchvision): the CPU path's run is the oracle, to the last digit."""

from __future__ import annotations

import json

import pytest
from helpers import TRAIN, entry_point_env, run

pytestmark = pytest.mark.slow


def toy_run(data_dir, out_dir, *overrides: str) -> tuple[str, dict]:
    env = entry_point_env(LARS_DATA_DIR=str(data_dir))
    command = [
        *TRAIN,
        "recipe=demo",
        "debug=toy",
        "data=demo_imagefolder",
        *overrides,
        f"hydra.run.dir={out_dir}",
    ]
    done = run(command, env=env, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    return output, json.loads((out_dir / "results.json").read_text())


def test_a_toy_run_on_device_decoded_batches_trains_as_the_cpu_paths_run(data_dir, tmp_path):
    output, device = toy_run(data_dir, tmp_path / "device", "data.decode=device")
    # without CUDA the same code decodes on the CPU: said once, not an error
    assert output.count("data.decode=device on a cpu device: batches decode on the CPU") == 1, output[-3000:]
    _, cpu = toy_run(data_dir, tmp_path / "cpu")
    assert device["steps"] == cpu["steps"] == 3
    for metric in ("train/loss", "val/loss", "val/top1"):
        assert device["metrics"][metric] == pytest.approx(cpu["metrics"][metric], rel=1e-6), metric
