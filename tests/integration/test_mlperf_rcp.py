"""`make check` on an MLPerf-derived recipe hands each run's mlperf.log to the RCP checker of mlperf-logging
and prints its verdict beside the t-test. Three real short runs of nvidia_mlperf10_3264 on the demo data
(timm's 0.4 M-parameter test_resnet, 12 steps per epoch, an evaluation after each epoch, at most 3 epochs),
each stopping at a target set for the test: 10 % top-1, the demo's chance level, because a few dozen CPU steps
teach this net little more. The oracles: each run's own epochs to target (results.json, its TimeToTarget) and
the package's check_directory run by the test on the same logs."""

from __future__ import annotations

import json
import logging
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from mlperf_logging.rcp_checker import rcp_checker

from lightning_lars.report import mlperf
from lightning_lars.report.results import RESULTS_FILE

pytestmark = [pytest.mark.slow, pytest.mark.demo_data(train_per_class=20, val_per_class=4)]
SEEDS = 3


def test_check_prints_the_rcp_checkers_verdict_on_the_runs_logs(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "check"
    done = subprocess.run(
        [sys.executable, "-m", "lightning_lars.check", "--recipe", "nvidia_mlperf10_3264", "--seeds", str(SEEDS),
         "--out", str(out), "--runs-file", str(tmp_path / "runs.jsonl"),
         "debug=toy", f"paths.data_dir={data_dir}", "model.arch=test_resnet", "batch.global_size=16",
         "batch.max_per_device=16", "batch.bn_group=null", "evaluation.every_n_epochs=1", "trainer.max_steps=36",
         "trainer.limit_val_batches=1.0", "callbacks.time_to_target.target_top1=10", "~logger"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]

    # the epochs the checker read from each mlperf.log are the runs' own epochs to target
    own = []
    for seed in range(SEEDS):
        metrics = json.loads((out / f"seed_{seed}" / RESULTS_FILE).read_text())["metrics"]
        reached = metrics.get("target/epochs_to_target")
        own.append(1e9 if reached is None else float(math.ceil(reached - 1e-9)))
    assert any(e < 1e9 for e in own), own  # at least one run converged: the reading is really exercised
    shown = ", ".join("not converged" if e >= 1e9 else f"{e:g}" for e in own)
    assert f"epochs to converge {shown} (each run's mlperf.log)" in output

    # the verdict printed is the package's own on these logs
    judged = tmp_path / "judged"
    judged.mkdir()
    for seed in range(SEEDS):
        shutil.copyfile(out / f"seed_{seed}" / "mlperf.log", judged / f"result_{seed}.txt")
    logging.disable(logging.CRITICAL)
    try:
        # as its command line does (the function's own default, "full_rcp", names no RCP set)
        passed, message, _ = rcp_checker.check_directory(
            str(judged), "training", "1.0.0", False, False, rcp_pass="pruned_rcps"
        )
        read = [rcp_checker.read_submission_file(str(p), "1.0.0", False)[1] for p in sorted(judged.iterdir())]
    finally:
        logging.disable(logging.NOTSET)
    assert read == own
    assert f"{message}: RCP test {'PASSED' if passed else 'FAILED'}" in output
    verdict = output[output.index("\nCheck: recipe") :]
    assert "test     " in verdict and "rcp      " in verdict  # beside the t-test, in the check's summary
    assert "rcp      " in (out / "check.txt").read_text()


def result_log(path, epochs: int, batch: int = 3264) -> None:
    """The lines the RCP checker reads from a converged run's log."""
    lines = [
        ("submission_benchmark", "resnet", {}),
        ("global_batch_size", batch, {}),
        ("eval_accuracy", 0.76, {"epoch_num": epochs}),
        ("run_stop", None, {"status": "success"}),
    ]
    path.write_text(
        "".join(
            ":::MLLOG " + json.dumps({"time_ms": 1, "key": k, "value": v, "metadata": m}) + "\n"
            for k, v, m in lines
        )
    )


@pytest.mark.parametrize(
    "epochs, verdict",
    [
        ([35, 35, 36, 35, 34], "PASSED"),  # olympic mean 35: no faster than the RCP allows (README's example)
        ([33, 33, 34, 33, 32], "FAILED"),  # olympic mean 33: faster than the fastest accepted mean (34.31)
        ([34, 35, 36], "PASSED"),  # 3 runs: the olympic mean of the middle one, 35
    ],
)
def test_verdict_lines_state_the_checkers_numbers(tmp_path, epochs, verdict):
    """At batch 3264 the v1.0 RCP holds 15 NVIDIA runs: its olympic mean is the reference; ours is the olympic
    mean of the runs; the verdict is the expected one, and PASSED or FAILED is check_directory's own answer on
    the same files."""
    logs = []
    for index, value in enumerate(epochs):
        logs.append(tmp_path / f"run{index}.log")
        result_log(logs[-1], value)
    lines = mlperf.rcp_verdict(logs, "1.0.0", tmp_path / "judged").lines()
    package = Path(rcp_checker.__file__).parent / "training_1.0.0" / "rcps_resnet.json"
    reference = sorted(json.loads(package.read_text())["resnet_ref_3264"]["Epochs to converge"])
    ours = sorted(epochs)[1:-1]
    assert f"reference mean {statistics.fmean(reference[1:-1]):.2f} epochs at batch 3264" in lines[1]
    assert f"ours (olympic mean) {statistics.fmean(ours):.2f}" in lines[1]
    logging.disable(logging.CRITICAL)
    try:
        passed, message, _ = rcp_checker.check_directory(
            str(tmp_path / "judged"), "training", "1.0.0", False, False, rcp_pass="pruned_rcps"
        )
    finally:
        logging.disable(logging.NOTSET)
    assert lines[2].strip() == f"{message}: RCP test {'PASSED' if passed else 'FAILED'}"
    assert lines[2].strip() == f"RCP found: RCP test {verdict}"  # an RCP at this very batch, and the verdict
    fastest = float(lines[1].split("fastest accepted mean ")[1].split(";")[0])
    assert (statistics.fmean(ours) >= fastest) == (verdict == "PASSED")  # the rule the verdict applies


def test_v06_logs_get_the_same_rcp_verdict(tmp_path):
    """A v0.6 round writes v0.6's own line format, which the RCP checker cannot read: it gets the events as mllog
    lines, so five v0.6 logs get the verdict the same runs get in mllog's format."""
    epochs = [35, 35, 36, 35, 34]
    mllog, v06 = [], []
    for index, value in enumerate(epochs):
        mllog.append(tmp_path / f"mllog{index}.log")
        result_log(mllog[-1], value)
        v06.append(tmp_path / f"v06_{index}.log")
        v06[-1].write_text(
            "".join(
                f":::MLL 1.000 {e['key']}: {json.dumps({'value': e['value'], 'metadata': e['metadata']})}\n"
                for e in mlperf.read_events(mllog[-1])
            )
        )
    assert mlperf.is_v06_log(v06[0]) and not mlperf.is_v06_log(mllog[0])
    ours = mlperf.rcp_verdict(v06, "0.6.0", tmp_path / "v06").lines()
    theirs = mlperf.rcp_verdict(mllog, "0.6.0", tmp_path / "mllog").lines()
    assert ours == theirs and "RCP test PASSED" in ours[2]
