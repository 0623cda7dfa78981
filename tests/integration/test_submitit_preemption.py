"""Preemption under Hydra's submitit launcher. submitit's jobs are warned with SIGUSR2
(``--signal=USR2@<signal_delay_s>``, or ``SUBMITIT_PREEMPT_SIGNAL``), not SIGUSR1; its own handler, on rank 0
only, re-pickles the job, runs ``scontrol requeue`` and exits mid-step while the other ranks wait, and no
checkpoint of the model is written.

Real parts: submitit's job runner (``python -m submitit.core._submit``, which installs submitit's handler and
runs the pickled job), the training entry point on 2 gloo ranks started the way srun starts them (SLURM_*
variables, one process per rank), and a real SIGUSR2 sent to both, as SLURM does. Stand-ins: ``scontrol`` on
PATH (records its arguments), and the pickled callable (`submitit_job.TrainJob`, what hydra-submitit-launcher
pickles, minus Hydra's sweep bookkeeping). The requeued job (same job id, same pickle) then resumes and ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import submitit
import torch
from helpers import free_port
from resume_runs import OVERRIDES, ROOT, env, make_demo_data
from submitit_job import TrainJob

pytestmark = pytest.mark.slow
JOB_ID = "4242"


def srun_tasks(tmp_path: Path, folder: Path, attempt: str, port: int) -> list[tuple[subprocess.Popen, Path]]:
    """What ``srun python -u -m submitit.core._submit FOLDER`` starts on a one-node job with 2 tasks."""
    base = env(
        tmp_path,
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        SUBMITIT_EXECUTOR="slurm",
        SLURM_JOB_ID=JOB_ID,
        SLURM_JOB_NAME="lars-demo",
        SLURM_NTASKS="2",
        SLURM_NTASKS_PER_NODE="2",
        SLURM_NNODES="1",
        SLURM_JOB_NUM_NODES="1",
        SLURM_NODEID="0",
        SLURM_NODELIST="127.0.0.1",
        SLURM_CPUS_PER_TASK="1",
        MASTER_PORT=str(port),
    )
    tasks = []
    for rank in (0, 1):
        log = tmp_path / f"{attempt}-rank{rank}.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                [sys.executable, "-u", "-m", "submitit.core._submit", str(folder)],
                cwd=ROOT,
                env={**base, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        tasks.append((process, log))
    return tasks


def finish(tasks, timeout_s: float = 900) -> list[tuple[int, str]]:
    results = []
    for process, log in tasks:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for other, _ in tasks:
                other.kill()
            raise AssertionError(f"hung: {log.read_text()[-3000:]}") from None
        results.append((process.returncode, log.read_text()))
    return results


def test_sigusr2_checkpoints_at_an_agreed_step_and_submitit_requeues(tmp_path):
    make_demo_data(tmp_path)
    (tmp_path / "bin").mkdir()
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.calls"}\n')
    scontrol.chmod(0o755)
    logs = tmp_path / "logs"
    overrides = [
        *OVERRIDES,
        f"paths.log_dir={logs}",
        "trainer.devices=2",
        "strategy=ddp",
        "~logger",
        # the ranks agree on the signal at every step (default: about every 10 s), so the stop is prompt
        "+callbacks.preemption._target_=lightning_lars.runtime.signal_checkpoint.SignalCheckpoint",
        "+callbacks.preemption.check_every_s=0",
    ]
    folder = tmp_path / "submitit"
    folder.mkdir()
    delayed = submitit.helpers.DelayedSubmission(TrainJob(overrides))
    delayed.set_timeout(timeout_min=60, max_num_timeout=3)  # as the executor does for timeout_min=60
    pickle = folder / f"{JOB_ID}_submitted.pkl"
    delayed.dump(pickle)
    run_dir = logs / "demo" / "runs" / f"slurm-{JOB_ID}"

    tasks = srun_tasks(tmp_path, folder, "first", free_port())
    first_checkpoint = run_dir / "checkpoints" / "epoch0-step4.ckpt"
    deadline = time.monotonic() + 900
    while (
        not first_checkpoint.exists()
        and all(p.poll() is None for p, _ in tasks)
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    pickled_at = pickle.stat().st_mtime_ns
    for process, _ in tasks:  # SLURM signals every task (--signal=USR2@90, not B:USR2)
        process.send_signal(signal.SIGUSR2)
    (rank0_code, rank0), (rank1_code, rank1) = finish(tasks)

    saved = sorted((run_dir / "checkpoints").glob("signal-step*.ckpt"))
    assert len(saved) == 1, rank0[-3000:] + rank1[-3000:]
    step = int(saved[0].stem.removeprefix("signal-step"))
    assert 4 <= step < 12  # one file, one step: both ranks stopped there
    for log in (rank0, rank1):
        assert f"preempted: signal SIGUSR2 at step {step}: checkpoint {saved[0]}" in log
        assert "Caught signal SIGUSR2" in log  # submitit's own handler ran, after the checkpoint
    assert "Requeued job 4242" in rank0 and "Exiting gracefully after preemption/timeout" in rank0
    assert rank0_code == 255 and rank1_code == 0, (rank0[-3000:], rank1[-3000:])  # submitit: sys.exit(-1)
    assert (tmp_path / "scontrol.calls").read_text().split() == ["requeue", JOB_ID]
    assert pickle.stat().st_mtime_ns > pickled_at  # submitit re-pickled the job (TrainJob.checkpoint)
    meta = torch.load(saved[0], map_location="cpu", weights_only=False)
    assert meta["global_step"] == step and len(meta["resume_state_per_rank"]) == 2

    # SLURM runs the same batch script again: same job id, the re-pickled job; it resumes from the checkpoint
    results = finish(srun_tasks(tmp_path, folder, "requeued", free_port()))
    for code, log in results:
        assert code == 0, log[-3000:]
    # Lightning: rank 0 says it
    assert f"Restoring states from the checkpoint path at {saved[0]}" in results[0][1]
    final = torch.load(run_dir / "final.pt", weights_only=False)
    assert final["global_step"] == 12
    assert (tmp_path / "scontrol.calls").read_text().split() == ["requeue", JOB_ID]  # no second requeue
