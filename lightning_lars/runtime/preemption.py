"""SLURM preemption glue: requeue plugin, one run folder per job, and the clean stop after a signal checkpoint.

How a preempted SLURM run comes back (submit with ``#SBATCH --signal=SIGUSR1@90`` so every rank is warned
90 s before the end, and ``#SBATCH --requeue``):

1. SIGUSR1 -> `lightning_lars.runtime.signal_checkpoint.SignalCheckpoint` waits for an optimizer-step boundary all
   ranks agree on, then runs Lightning's ``SLURMEnvironment(auto_requeue=True)`` handler: it saves
   ``hpc_ckpt_<n>.ckpt`` in the run folder and calls ``scontrol requeue $SLURM_JOB_ID``; the run then stops
   with `Preempted` (exit code 0). Under Hydra's submitit launcher the signal is submitit's (SIGUSR2 unless
   ``SUBMITIT_PREEMPT_SIGNAL`` names another): we save ``signal-step<n>.ckpt`` there, and submitit's own
   handler requeues once fit has unwound (`Preempted.then`).
2. SLURM starts the same batch script again with the same job id. `run_dir_overrides` gives both attempts
   the same run folder (``.../runs/slurm-<job id>``), so `lightning_lars.runtime.resume` finds the checkpoint there
   and the run continues exactly where it stopped, in the same W&B run. Under Hydra's submitit launchers (local
   or SLURM) the job's folder is its sweep folder, the same for every attempt: the requeued job (same job id,
   `scheduled_job_id`) resumes from the newest checkpoint there.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable

import psutil  # wandb's dependency: this process's start time
from lightning.fabric.plugins.environments import SLURMEnvironment

from lightning_lars.core.errors import UserError


class Preempted(Exception):
    """The run stopped on purpose after a signal checkpoint; the message says where it is and how it resumes.

    ``then``: what the entry point runs once fit has unwound (submitit's requeue handler), or None.
    ``exit_status``: the process's exit status: 0 for a requeue (a planned stop), 128 + the signal for Ctrl-C
    (130) and SIGTERM (143): a shell, and the schedulers that send SIGTERM to end a job (scancel, Kubernetes),
    expect the status of a process that signal ended.
    """

    def __init__(self, message: str, then: Callable[[], None] | None = None, exit_status: int = 0):
        super().__init__(message)
        self.then = then
        self.exit_status = exit_status


# submitit/core/job_environment.py: USR2 unless this names another
SUBMITIT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"


def preemption_signals(names: list[str] | None = None) -> list[int]:
    """SIGUSR1 (our sbatch, Lightning's requeue signal) and the one submitit sends, or the named ones."""
    if names is None:
        names = ["SIGUSR1", "SIG" + os.environ.get(SUBMITIT_SIGNAL_ENV, "USR2").removeprefix("SIG")]
    signums = []
    for name in names:
        signum = getattr(signal, name if name.startswith("SIG") else f"SIG{name}", None)
        if not isinstance(signum, signal.Signals):
            raise UserError(
                f"unknown signal {name!r} (from {SUBMITIT_SIGNAL_ENV} or signal_names): use e.g. USR2"
            )
        if signum not in signums:
            signums.append(signum)
    return signums


def is_submitit_handler(handler) -> bool:
    """True for the handler submitit installs in its jobs (``SignalHandler.checkpoint_and_try_requeue``)."""
    return getattr(handler, "__module__", "").startswith("submitit.")


def requeue_job_id() -> str | None:
    """The id ``scontrol requeue`` takes (``<array job>_<task>`` for array jobs), or None outside SLURM."""
    if not SLURMEnvironment.detect():
        return None
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None and "SLURM_ARRAY_TASK_ID" in os.environ:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def scheduled_job_id() -> str | None:
    """The id a requeued job keeps: SLURM's (`requeue_job_id`), or submitit's local executor's (the pid of the
    controller that restarts the task after a requeue, ``SUBMITIT_LOCAL_JOB_ID``); None outside a scheduler."""
    job_id = requeue_job_id()
    if job_id is None and os.environ.get("SUBMITIT_EXECUTOR") == "local":
        job_id = os.environ.get("SUBMITIT_LOCAL_JOB_ID")
    return job_id


def started_here(pid: int, started: float) -> float:
    """``started`` (a ``time.perf_counter()``) where ``pid`` is this process, else this process's own start.

    A submitit job unpickles the entry point in a fresh process (each attempt of a requeued job, on whichever
    node): its start-up counts from that process's start, not from the submitting command's clock reading.
    """
    if pid == os.getpid():
        return started
    return time.perf_counter() - (time.time() - psutil.Process().create_time())


def cluster_plugins() -> list:
    """Trainer plugins for the cluster: under a SLURM batch job, requeue on SIGUSR1; elsewhere none.

    Lightning would detect SLURM by itself with these same defaults; naming them here keeps the behaviour
    visible and fixed whatever Lightning's defaults become.
    """
    if not SLURMEnvironment.detect():
        return []
    return [SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)]


def run_dir_overrides(argv: list[str]) -> list[str]:
    """Under SLURM, pin Hydra's run folder to the job id so a requeued job finds its checkpoints.

    Returns the extra command-line overrides (none outside SLURM or when the user chose ``hydra.run.dir``).
    """
    job_id = requeue_job_id()
    if job_id is None or any(a.startswith("hydra.run.dir=") for a in argv):
        return []
    if not re.fullmatch(r"[0-9_]+", job_id):  # it becomes a folder name
        return []
    return [f"hydra.run.dir=${{paths.log_dir}}/${{recipe_name}}/runs/slurm-{job_id}"]
