"""A cluster user's view of one real demo run: ``train.log`` holds its progress, evaluations and results table,
no rate reads ``nan``, and every ``wandb sync`` line pastes into a shell as it is, the log folder's space
included.

One run of 2 optimizer steps of one 64-image batch each (80 train images: one step an epoch), evaluated after
both: the progress line of step 2 follows an evaluation and an epoch's restart of the rate window, and the
throughput monitor skips 2 warm-up batches, so the run has no rate to show (what printed ``nan`` before).
"""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest
from helpers import TRAIN, make_demo_data, run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[str, Path]:
    """(console, run folder) of the run, its logs under a folder whose name holds a space."""
    tmp = tmp_path_factory.mktemp("run_log_file")
    data = make_demo_data(tmp / "data", train_per_class=8, val_per_class=4)
    logs = tmp / "my logs"
    done = run(
        [*TRAIN, "recipe=demo", "debug=toy", f"paths.data_dir={data}", f"paths.log_dir={logs}",
         "trainer.max_steps=2", "trainer.max_epochs=2", "batch.max_per_device=64", "trainer.log_every_n_steps=1"],
        timeout=900,
    )  # fmt: skip
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-3000:]
    (run_dir,) = (logs / "demo" / "runs").iterdir()
    return console, run_dir


def test_train_log_holds_progress_evaluations_and_the_results_table(demo_run):
    console, run_dir = demo_run
    log = (run_dir / "train.log").read_text()
    for step in (1, 2):  # one progress line per log step (trainer.log_every_n_steps=1), and each evaluation
        assert len(re.findall(rf"\[train\] epoch [\d.]+/[\d.]+ step {step}/2 ", log)) == 1, log[-3000:]
        assert len(re.findall(rf"\[val\] epoch [\d.]+ step {step} \| val/loss ", log)) == 1, log[-3000:]
    assert "Results: recipe demo" in log and re.search(r"top-1 \(val\) +\d+\.\d\d %", log), log[-3000:]
    assert "Report: " in log and "results.json" in log
    # the console's lines are the file's, not a second wording
    train_lines = [ln for ln in console.splitlines() if ln.startswith(("[train] epoch", "[val] epoch"))]
    assert len(train_lines) == 4 and all(ln in log for ln in train_lines), train_lines


def test_no_rate_reads_nan(demo_run):
    console, run_dir = demo_run
    log = (run_dir / "train.log").read_text()
    for text in (console, log):
        assert "nan" not in text.lower(), [ln for ln in text.splitlines() if "nan" in ln.lower()]
    # no window of two batches in one epoch: the rate was never measured, and says so
    rates = re.findall(r"\| (\S+) img/s \|", console)
    assert rates == ["-", "-"], rates
    (images,) = [ln for ln in console.splitlines() if ln.startswith("images/s (train, all devices)")]
    (wait,) = [ln for ln in console.splitlines() if ln.startswith("data wait (share of train time)")]
    assert "- (too few steps to measure)" in images and "- (too few steps to measure)" in wait


def test_wandb_sync_lines_paste_into_a_shell(demo_run):
    console, run_dir = demo_run
    assert " " in str(run_dir)
    notice = re.search(r"`(wandb sync [^`]+)`", console).group(1)  # at the start, with the shell's glob
    (sync_glob,) = shlex.split(notice)[2:]
    assert glob.glob(sync_glob) == [str(p) for p in (run_dir / "wandb").glob("offline-run-*")] != []
    (table_line,) = [ln for ln in console.splitlines() if "upload it with: wandb sync" in ln]
    (path,) = shlex.split(table_line.split("upload it with: ", 1)[1])[2:]
    assert Path(path).is_dir() and Path(path).parent == run_dir / "wandb"
