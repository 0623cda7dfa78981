"""Shared by the launcher tests (test_submitit_local.py, test_slurm_launcher.py): the two-job demo sweep a user
starts through one of Hydra's submitit launchers, waiting on it, and what job 0, preempted with submitit's
signal and requeued, must leave behind."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import torch

STEPS = 12
LOG_TIME = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]"  # Hydra's job log: each record starts with its time


def sweep_command(launcher: str, logs: Path, *extra: str) -> list[str]:
    """``python -m lightning_lars.train -m hydra/launcher=LAUNCHER ...``: seeds 0 and 1 of the toy demo, a
    checkpoint every 2 steps."""
    return [
        sys.executable,
        "-m",
        "lightning_lars.train",
        "-m",
        f"hydra/launcher={launcher}",
        "recipe=demo",
        "debug=toy",
        "seed=0,1",
        f"trainer.max_steps={STEPS}",
        "callbacks.checkpoint.every_n_train_steps=2",
        f"paths.log_dir={logs}",
        *extra,
    ]


def wait_for(what, process: subprocess.Popen, timeout_s: float = 900, message: str = "", poll_s: float = 0.2):
    """``what()``'s first true value, polled every ``poll_s`` while the sweep runs; fails with ``message`` when
    none came."""
    deadline = time.monotonic() + timeout_s
    while process.poll() is None and time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(poll_s)
    raise AssertionError(f"{message} (sweep exit status {process.poll()})")


def logged(log: str, pattern: str) -> list[tuple[datetime, tuple[str, ...]]]:
    """(time logged, the pattern's groups) of each train.log record that matches ``pattern``."""
    return [
        (datetime.strptime(found[0], "%Y-%m-%d %H:%M:%S,%f"), found[1:])
        for found in (m.groups() for m in re.finditer(LOG_TIME + r".*" + pattern, log, re.M))
    ]


def assert_resumed_in_its_wandb_run(sweep_dir: Path, job: Path) -> tuple[Path, int]:
    """Job ``job`` saved a signal checkpoint mid-run, both jobs of the sweep ran to the end, and the job's two
    attempts logged into one W&B run, the one its checkpoint names. (The checkpoint, its step.)"""
    (saved,) = (job / "checkpoints").glob("signal-step*.ckpt")
    step = int(saved.stem.removeprefix("signal-step"))
    assert 2 <= step < STEPS
    for run in (job, sweep_dir / "1"):  # both jobs ran to the end and wrote their results
        assert (run / "results.json").is_file(), run
        assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == STEPS
    run_id = torch.load(saved, weights_only=False)["wandb_run_id"]
    attempts = sorted(p.name for p in (job / "wandb").glob("offline-run-*"))
    assert len(attempts) == 2 and all(re.fullmatch(rf"offline-run-.*-{run_id}", a) for a in attempts), (
        attempts
    )
    return saved, step
