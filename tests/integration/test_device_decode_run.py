"""`debug=toy` with the demo's JPEGs decoded by the device path (``data.decode=device``) through the real entry
point on a CPU: the path a GPU job selects, run end to end where only the nvJPEG call differs (~70 s a run here).
The demo's JPEGs are 32 px, the toy's resolution, so the resize is the identity and both paths feed the same
pixels (libjpeg-turbo decodes for PIL and torchvision): the CPU path's run is the oracle, to the last digit."""

from __future__ import annotations

import json

import pytest
from helpers import TRAIN, entry_point_env, run

pytestmark = pytest.mark.slow


def toy_run(data_dir, out_dir, *overrides: str, data: str = "demo_imagefolder") -> tuple[str, dict]:
    env = entry_point_env(LARS_DATA_DIR=str(data_dir))
    command = [
        *TRAIN,
        "recipe=demo",
        "debug=toy",
        f"data={data}",
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


def test_a_toy_run_on_device_decoded_beton_batches_trains_as_ffcvs_cpu_paths_run(data_dir, tmp_path):
    """The demo's .beton holds raw 32 px pixels and its pipeline crops the whole image (centre crop, ratio 1):
    FFCV's resize and the batched one are both the identity there, and the seeded flips are the same coins, so
    FFCV's own CPU path is the oracle (data/beton_device_decode.py). To 1e-5, not the last digit: FFCV normalises
    through a table computed in float64, the device path in float32 (1 ulp a pixel; measured: val/loss 1.5e-6
    apart); a flip or crop off would move the losses by far more."""
    output, device = toy_run(data_dir, tmp_path / "device", "data.decode=device", data="demo")
    assert output.count("data.decode=device on a cpu device: batches decode on the CPU") == 1, output[-3000:]
    _, cpu = toy_run(data_dir, tmp_path / "cpu", data="demo")
    assert device["steps"] == cpu["steps"] == 3
    for metric in ("train/loss", "val/loss", "val/top1"):
        assert device["metrics"][metric] == pytest.approx(cpu["metrics"][metric], rel=1e-5), metric
