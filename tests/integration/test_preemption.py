"""SLURM preemption: SIGUSR1 -> checkpoint at a step boundary -> ``scontrol requeue`` -> the requeued
job (same command, same job id) resumes by itself and ends bitwise where an unbroken run ends.

SLURM is simulated the way a batch job sees it: SLURM_* variables and a stand-in ``scontrol`` on PATH that
records its arguments. Lightning's ``SLURMEnvironment(auto_requeue=True)`` does the saving and the requeue.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import lightning as L
import pytest
import torch
from helpers import SLURM_VARS, free_port, outside_slurm
from lightning.pytorch.demos.boring_classes import BoringModel
from resume_runs import ROOT, assert_same_training, env, reference_run, train_command

from lightning_lars.runtime import resume
from lightning_lars.runtime.checkpoint_io import AtomicCheckpointIO
from lightning_lars.runtime.checkpointing import Checkpoint, ResumeState
from lightning_lars.runtime.signal_checkpoint import SignalCheckpoint

pytestmark = pytest.mark.slow


def fake_scontrol(folder):
    """An ``scontrol`` that appends its arguments to ``scontrol.calls`` and succeeds."""
    folder.mkdir()
    script = folder / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> {folder / "scontrol.calls"}\n')
    script.chmod(0o755)
    return folder / "scontrol.calls"


def test_sigusr1_checkpoints_requeues_and_the_requeued_job_resumes_exactly(shared_runs, tmp_path):
    reference = reference_run(shared_runs)
    calls = fake_scontrol(tmp_path / "bin")
    job_env = env(shared_runs, **SLURM_VARS, PATH=f"{tmp_path / 'bin'}:{env(shared_runs)['PATH']}")
    logs = tmp_path / "logs"
    command = train_command(shared_runs, f"paths.log_dir={logs}")  # no hydra.run.dir: pinned to the job id
    run_dir = logs / "demo" / "runs" / "slurm-4242"

    with open(tmp_path / "first.log", "w") as log:
        job = subprocess.Popen(command, cwd=ROOT, env=job_env, stdout=log, stderr=subprocess.STDOUT)
        first_checkpoint = run_dir / "checkpoints" / "epoch0-step4.ckpt"
        deadline = time.monotonic() + 600
        while not first_checkpoint.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        job.send_signal(signal.SIGUSR1)  # SLURM's warning, --signal=SIGUSR1@90
        job.wait(timeout=600)
    first = (tmp_path / "first.log").read_text()
    assert job.returncode == 0, first[-3000:]
    assert "preempted: signal SIGUSR1 at step" in first and "SLURM job 4242 requeued" in first
    assert "Traceback" not in first
    assert calls.read_text().split() == ["requeue", "4242"]
    (hpc,) = run_dir.glob("hpc_ckpt_*.ckpt")
    saved = torch.load(hpc, weights_only=True)
    progress = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]
    assert 4 < saved["global_step"] < 12 and progress["processed"] == 2 * saved["global_step"]
    assert progress["completed"] == progress["processed"] - 1  # saved at the end of a step, not inside one
    assert not (run_dir / "final.pt").exists()

    requeued = subprocess.run(
        command, cwd=ROOT, env=job_env, capture_output=True, text=True, timeout=600, check=False
    )
    output = requeued.stdout + requeued.stderr
    assert requeued.returncode == 0, output[-3000:]
    assert f"Restoring states from the checkpoint path at {hpc}" in output
    assert_same_training(torch.load(run_dir / "final.pt", weights_only=False), reference)
    assert calls.read_text().split() == ["requeue", "4242"]  # no second requeue


class SlowSteps(BoringModel):
    """Each micro-batch takes at least 50 ms: time, not a step count, sets the agreements."""

    def training_step(self, batch, batch_idx):
        time.sleep(0.05)
        return super().training_step(batch, batch_idx)


class SignalRanks(L.Callback):
    """In the middle of step 2, each rank named in ``signals`` gets its signal ({rank: signum})."""

    def __init__(self, signals: dict[int, int]):
        self.signals = signals

    def on_before_backward(self, trainer, pl_module, loss):
        if trainer.global_step == 2 and trainer.global_rank in self.signals:
            os.kill(os.getpid(), self.signals[trainer.global_rank])


def two_gloo_ranks(tmp_path, monkeypatch, **trainer_args) -> L.Trainer:
    """A Trainer on 2 CPU ranks (ddp_spawn, gloo) outside SLURM, quiet: what the agreement tests share."""
    outside_slurm(monkeypatch)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # not Lightning's pick from the ephemeral range
    return L.Trainer(
        default_root_dir=tmp_path,
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **trainer_args,
    )


def test_ranks_agree_on_the_signal_step_by_time_and_save_every_ranks_rng(tmp_path, monkeypatch):
    """log_every_n_steps=50 and 4 micro-batches per step (heavy accumulation): the agreement still comes within
    about ``check_every_s`` of the signal, at a step every rank chose."""
    trainer = two_gloo_ranks(
        tmp_path,
        monkeypatch,
        max_steps=40,
        log_every_n_steps=50,
        accumulate_grad_batches=4,
        plugins=[AtomicCheckpointIO()],
        callbacks=[
            # only rank 1 gets SIGUSR1: both ranks must still checkpoint at the same step, the next agreement
            # (all-reduces about every check_every_s seconds, not at every step: a host sync)
            SignalRanks({1: signal.SIGUSR1}),
            ResumeState(),
            SignalCheckpoint(check_every_s=1.0),  # >= 1 s / (4 x 50 ms) = 5 steps between agreements
            Checkpoint(dirpath=tmp_path / "ckpt"),
        ],
    )
    with pytest.raises(Exception, match=r"Preempted: signal SIGUSR1 at step (\d+)") as stopped:
        trainer.fit(SlowSteps())
    step = int(re.search(r"at step (\d+)", str(stopped.value)).group(1))
    (saved,) = (tmp_path / "ckpt").glob("signal-step*.ckpt")
    assert saved.name == f"signal-step{step}.ckpt"  # one file: both ranks stopped at this step
    # agreements after step 1 (the first step's time), then every <= 5 steps: the first one after the signal
    assert 3 <= step <= 8, step
    meta = resume.load_meta(saved)
    assert meta["global_step"] == step and len(meta[resume.PER_RANK_KEY]) == 2
    assert all("torch" in rank["rng"] for rank in meta[resume.PER_RANK_KEY])


def test_ranks_that_saw_different_signals_stop_alike_on_the_preemption_signal(tmp_path, monkeypatch):
    """One callback catches all four signals: a rank's SIGTERM does not override another's SIGUSR1 (whose
    requeue would be lost), and both ranks save one checkpoint at one step."""
    trainer = two_gloo_ranks(
        tmp_path,
        monkeypatch,
        max_steps=40,
        plugins=[AtomicCheckpointIO()],
        callbacks=[
            # as when a cluster's warning and a kill reach a job's tasks in different orders
            SignalRanks({0: signal.SIGTERM, 1: signal.SIGUSR1}),
            SignalCheckpoint(check_every_s=0.0),
            Checkpoint(dirpath=tmp_path / "ckpt"),
        ],
    )
    with pytest.raises(Exception, match=r"Preempted: signal SIGUSR1 at step 3\b"):
        trainer.fit(SlowSteps())
    assert [p.name for p in (tmp_path / "ckpt").glob("signal-step*.ckpt")] == ["signal-step3.ckpt"]


class AgreementSteps(SignalCheckpoint):
    """Writes the steps at which this rank took part in an agreement to ``<folder>/agreements-rank<r>.txt``."""

    def __init__(self, folder, **kwargs):
        super().__init__(**kwargs)
        self.folder, self.steps = folder, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        before = self.num_agreements
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self.num_agreements > before:
            self.steps.append(trainer.global_step)

    def on_train_end(self, trainer, pl_module):
        (self.folder / f"agreements-rank{trainer.global_rank}.txt").write_text(" ".join(map(str, self.steps)))


class SlowStart(SlowSteps):
    """SlowSteps whose loader takes ``start_up_s`` seconds to give its first batch, as a loader starting worker
    processes or compiling FFCV's pipeline does: that time is not step time."""

    def __init__(self, start_up_s: float):
        super().__init__()
        self.start_up_s = start_up_s

    def train_dataloader(self):
        return SlowFirstBatch(super().train_dataloader(), self.start_up_s)


class SlowFirstBatch:
    def __init__(self, loader, start_up_s: float):
        self.loader, self.start_up_s, self.started = loader, start_up_s, False

    def __len__(self):
        return len(self.loader)

    def __iter__(self):  # a generator: Lightning's iter() probe at set-up runs none of it
        if not self.started:
            self.started = True
            time.sleep(self.start_up_s)
        yield from self.loader


@pytest.mark.parametrize("start_up_s", [0.0, 3.0])
def test_agreements_fall_on_log_steps_when_a_log_interval_fits_the_window(tmp_path, monkeypatch, start_up_s):
    """log_every_n_steps=5 and 50+ ms steps: 2 s hold >= 5 steps, so after the first agreement (step 1, which
    measures the step time) every all-reduce and its host read come at a log step, where logging reads anyway.
    A loader that takes 3 s to start (longer than the window) changes nothing: its start-up is not step time."""
    trainer = two_gloo_ranks(
        tmp_path,
        monkeypatch,
        max_steps=90,
        enable_checkpointing=False,
        log_every_n_steps=5,
        callbacks=[AgreementSteps(tmp_path, check_every_s=2.0)],  # steps under 400 ms: a window of >= 5
    )
    trainer.fit(SlowStart(start_up_s))
    steps = [(tmp_path / f"agreements-rank{rank}.txt").read_text().split() for rank in (0, 1)]
    assert steps[0] == steps[1]  # both ranks took part in the same all-reduces
    first, *later = map(int, steps[0])
    assert first == 1 and later and all(step % 5 == 0 for step in later), steps[0]
