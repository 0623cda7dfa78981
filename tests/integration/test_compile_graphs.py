"""A compiled run compiles in warm-up and never again: no graph break at any time, and after the first
epoch and its validation no new graph and no recompilation, across the LR changing at every step and the
train -> validation -> train switches. Real entry point, CPU, ``model.compile=default``; the oracle is
dynamo's own bookkeeping (``torch._dynamo.utils.counters``, read by ``compile_runs.DynamoCounters``).

Cases: the demo recipe at toy size (resnet10t, ghost BN over 16 of each 32-image micro-batch, accumulation
of 2) and NVIDIA's MLPerf v1.0 ResNet-50 recipe (channels_last) on generated 32 px data in bf16 autocast.
Slow: compiling dominates; the demo case took 1785 s on 2 cores shared at load average 15-20 (2026-11-26),
ResNet-50's first compiled step 316 s at a similar load.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from resume_runs import ROOT, env, make_demo_data

pytestmark = pytest.mark.slow

SHORT_RUN = [
    "debug=toy",
    "model.compile=default",
    "trainer.max_steps=-1",
    "trainer.max_epochs=3",  # epoch 1 warms up; epochs 2-3 must compile nothing
    "trainer.limit_val_batches=2",
    "~logger",
    "+callbacks.dynamo_counters._target_=compile_runs.DynamoCounters",
]
CASES = {
    "demo": ["recipe=demo"],
    "resnet50": [
        "recipe=nvidia_mlperf10_3264",
        "data=synthetic",
        "data.resolution=32",  # ResNet-50 downsamples 32x: a 1x1 last feature map
        "trainer.precision=bf16-mixed",  # autocast on the CPU, as the recipe's 16-mixed is on GPUs
        "data.num_train_images=128",  # 2 optimizer steps of 64 per epoch
        "data.num_val_images=64",
    ],
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compile_graphs")
    make_demo_data(tmp)
    return tmp


@pytest.mark.parametrize("case", CASES)
def test_no_graph_break_and_no_recompilation_after_warm_up(shared, case):
    run_dir = shared / case
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_lars.train",
            *CASES[case],
            *SHORT_RUN,
            f"paths.log_dir={shared / 'logs'}",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        env=env(shared, TORCHINDUCTOR_CACHE_DIR=str(shared / "inductor")),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    seen = json.loads((run_dir / "dynamo_counters.json").read_text())
    warm_up, after = seen["warm_up"], seen["after"]
    assert warm_up["unique_graphs"] >= 2, warm_up  # compiled: a training graph and an eval graph
    assert warm_up["graph_break"] == {} and after["graph_break"] == {}, seen
    assert after["unique_graphs"] == 0 and after["recompiles"] == {}, after
    assert seen["optimizer_steps"] >= 6  # 3 epochs of at least 2 steps: epochs 2-3 ran after warm-up
    # the schedule moved the LR at every optimizer step (warmup, then decay), under the compiled model
    assert len(set(seen["lrs"])) >= seen["optimizer_steps"] - 1, seen["lrs"]
