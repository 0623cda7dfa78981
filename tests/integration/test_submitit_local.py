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
from datetime import datetime

import pytest
from preempted_sweep import assert_resumed_in_its_wandb_run, logged, sweep_command, wait_for
from resume_runs import ROOT, env, make_demo_data

pytestmark = pytest.mark.slow


def test_a_local_sweep_finishes_and_a_preempted_job_resumes_in_its_wandb_run(tmp_path):
    make_demo_data(tmp_path)
    logs = tmp_path / "logs"
    command = sweep_command("submitit_local", logs)
    with open(tmp_path / "sweep.log", "w") as out:
        sweep = subprocess.Popen(command, cwd=ROOT, env=env(tmp_path), stdout=out, stderr=subprocess.STDOUT)
        wait_for((logs / "demo" / "multiruns").exists, sweep, message="no sweep folder")
        (sweep_dir,) = (logs / "demo" / "multiruns").iterdir()
        job = sweep_dir / "0"
        # polled often: the signal must reach the job well before its last step
        wait_for(
            (job / "checkpoints" / "epoch0-step2.ckpt").exists, sweep, message="no checkpoint", poll_s=0.05
        )
        task = int(re.match(r"pid (\d+)", (job / ".run.lock").read_text()).group(1))
        signalled = datetime.now()
        os.kill(task, signal.SIGUSR2)  # the local controller's preemption signal, to its task
        sweep.wait(timeout=900)
    output = (tmp_path / "sweep.log").read_text()
    assert sweep.returncode == 0, output[-3000:]

    saved, step = assert_resumed_in_its_wandb_run(sweep_dir, job)
    log = (job / "train.log").read_text()  # Hydra's job log: both attempts' log records, with times
    job_logs = "".join(p.read_text() for p in (sweep_dir / ".submitit").glob("*/*_log.*"))  # stdout, stderr
    assert f"preempted: signal SIGUSR2 at step {step}: checkpoint {saved}" in job_logs
    # submitit's handler: exit status 144, its controller starts the task again
    assert "Requeued job" in job_logs
    assert "resuming requeued job" in log and f"Restoring states from the checkpoint path at {saved}" in log
    assert len(list((sweep_dir / "1" / "wandb").glob("offline-run-*"))) == 1

    # the requeued attempt counts its start-up from its own start, which came after the signal
    (first, _), (requeued_at, (requeued_s,)) = logged(log, r"first optimizer step done ([0-9.]+) s")
    requeued_s = float(requeued_s)
    assert requeued_at > signalled and requeued_s <= (requeued_at - signalled).total_seconds() + 1, (
        requeued_s,
        requeued_at - signalled,
    )
