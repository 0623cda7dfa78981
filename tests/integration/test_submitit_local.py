"""``-m hydra/launcher=submitit_local`` as a user runs it: Hydra's submitit launcher starts one submitit job
per swept value (a controller process that runs the pickled Hydra job as its task), and a job preempted with
submitit's own signal (SIGUSR2: what the local controller sends ``signal_delay_s`` before ``timeout_min``, and
SLURM before the time limit) checkpoints, exits with submitit's requeue status and is started again by its
controller, which resumes it from that checkpoint in the same W&B run.

Real parts: the entry point, Hydra's basic sweeper and submitit launcher, submitit's local executor and its
requeue, W&B offline, a real signal to the task process (its pid is in the run folder's ``.run.lock``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import torch
from resume_runs import ROOT, env, make_demo_data

pytestmark = pytest.mark.slow
STEPS = 12


def wait_for(path: Path, process: subprocess.Popen, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), f"{path} never appeared (sweep exit status {process.poll()})"


def first_step_line(log: str) -> list[tuple[datetime, float]]:
    """(time logged, seconds reported) of each attempt's ``first optimizer step done X s`` line in train.log."""
    found = re.findall(
        r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\].*first optimizer step done ([0-9.]+) s", log, re.M
    )
    return [(datetime.strptime(when, "%Y-%m-%d %H:%M:%S,%f"), float(s)) for when, s in found]


def test_a_local_sweep_finishes_and_a_preempted_job_resumes_in_its_wandb_run(tmp_path):
    make_demo_data(tmp_path)
    logs = tmp_path / "logs"
    command = [
        sys.executable,
        "-m",
        "lightning_lars.train",
        "-m",
        "hydra/launcher=submitit_local",
        "recipe=demo",
        "debug=toy",
        "seed=0,1",
        f"trainer.max_steps={STEPS}",
        "callbacks.checkpoint.every_n_train_steps=2",
        f"paths.log_dir={logs}",
    ]
    with open(tmp_path / "sweep.log", "w") as out:
        sweep = subprocess.Popen(command, cwd=ROOT, env=env(tmp_path), stdout=out, stderr=subprocess.STDOUT)
        wait_for(logs / "demo" / "multiruns", sweep)
        (sweep_dir,) = (logs / "demo" / "multiruns").iterdir()
        job = sweep_dir / "0"
        wait_for(job / "checkpoints" / "epoch0-step2.ckpt", sweep)
        task = int(re.match(r"pid (\d+)", (job / ".run.lock").read_text()).group(1))
        signalled = datetime.now()
        os.kill(task, signal.SIGUSR2)  # the local controller's preemption signal, to its task
        sweep.wait(timeout=900)
    output = (tmp_path / "sweep.log").read_text()
    assert sweep.returncode == 0, output[-3000:]

    (saved,) = (job / "checkpoints").glob("signal-step*.ckpt")
    step = int(saved.stem.removeprefix("signal-step"))
    assert 2 <= step < STEPS
    log = (job / "train.log").read_text()  # Hydra's job log: both attempts' log records, with times
    job_logs = "".join(p.read_text() for p in (sweep_dir / ".submitit").glob("*/*_log.*"))  # stdout, stderr
    assert f"preempted: signal SIGUSR2 at step {step}: checkpoint {saved}" in job_logs
    assert (
        "Requeued job" in job_logs
    )  # submitit's handler: exit status 144, its controller starts the task again
    assert "resuming requeued job" in log and f"Restoring states from the checkpoint path at {saved}" in log
    for run in (job, sweep_dir / "1"):  # both jobs ran to the end and wrote their results
        assert (run / "results.json").is_file(), run
        assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == STEPS

    # one W&B run continued: the offline folders of both attempts carry the id the checkpoint stored
    run_id = torch.load(saved, weights_only=False)["wandb_run_id"]
    attempts = sorted(p.name for p in (job / "wandb").glob("offline-run-*"))
    assert len(attempts) == 2 and all(name.endswith(f"-{run_id}") for name in attempts), attempts
    assert len(list((sweep_dir / "1" / "wandb").glob("offline-run-*"))) == 1

    # the requeued attempt counts its start-up from its own start, which came after the signal
    (first, _), (requeued_at, requeued_s) = first_step_line(log)
    assert requeued_at > signalled and requeued_s <= (requeued_at - signalled).total_seconds() + 1, (
        requeued_s,
        requeued_at - signalled,
    )
