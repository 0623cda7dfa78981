"""Checkpoints are written atomically, a failed write loses nothing, a signal checkpoints at a step boundary, a
SLURM job keeps one run folder, and the newest files survive a resume (which checkpoint a run resumes from:
``test_resume_choice.py``). Real Lightning Trainer on BoringModel; seconds on CPU."""

from __future__ import annotations

import builtins
import errno
import logging
import os
import random
import re
import signal
import sys
import time

import lightning as L
import numpy as np
import pytest
import torch
from helpers import SLURM_VARS, outside_slurm
from lightning.pytorch.demos.boring_classes import BoringModel

from lightning_lars.runtime import checkpoint_io, preemption, resume
from lightning_lars.runtime.checkpoint_io import AtomicCheckpointIO
from lightning_lars.runtime.checkpointing import Checkpoint, ResumeState
from lightning_lars.runtime.preemption import Preempted
from lightning_lars.runtime.signal_checkpoint import SignalCheckpoint


class DiskFull:
    """A file opened for writing that takes ``budget`` bytes, then fails like a full disk (ENOSPC)."""

    def __init__(self, path, mode, budget):
        self.file = builtins.open(path, mode)  # noqa: SIM115 -- closed by __exit__, like the real file
        self.budget = budget

    def write(self, data):
        if len(data) > self.budget:
            self.file.write(bytes(data[: self.budget]))  # a partial write lands first, as on a real disk
            self.budget = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.budget -= len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def fill_disk_after(monkeypatch, budget: int) -> None:
    """Every checkpoint file opened from now on fails with ENOSPC after ``budget`` bytes."""
    monkeypatch.setattr(
        checkpoint_io, "open", lambda path, mode="r", *a, **k: DiskFull(path, mode, budget), raising=False
    )


def payload(tag: float) -> dict:
    return {"state_dict": {"w": torch.full((1000,), tag)}, "loops": {}, "global_step": int(tag)}


def test_atomic_write_round_trip_leaves_no_temp_file(tmp_path):
    io = AtomicCheckpointIO()
    io.save_checkpoint(payload(1.0), tmp_path / "sub" / "a.ckpt")
    loaded = torch.load(tmp_path / "sub" / "a.ckpt", weights_only=True)
    assert torch.equal(loaded["state_dict"]["w"], torch.full((1000,), 1.0))
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["a.ckpt"]


def test_disk_full_mid_write_keeps_previous_checkpoint(tmp_path, monkeypatch, caplog):
    io, target = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint(payload(1.0), target)
    fill_disk_after(monkeypatch, budget=2000)  # the new checkpoint is ~4 kB: it fails part-way
    with caplog.at_level(logging.WARNING, logger="lightning_lars.runtime.checkpoint_io"):
        io.save_checkpoint(payload(2.0), target)
        io.save_checkpoint(payload(3.0), target)
    assert io.num_failed_writes == 2 and io.last_error.errno == errno.ENOSPC
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("\n" not in w for w in warnings)
    assert "NOT written" in warnings[0] and "No space left" in warnings[0] and "2 failed" in warnings[1]
    assert torch.load(target, weights_only=True)["global_step"] == 1  # the previous one, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no partial temp file left
    monkeypatch.undo()
    io.save_checkpoint(payload(4.0), target)
    assert torch.load(target, weights_only=True)["global_step"] == 4


def boring_trainer(tmp_path, callbacks, max_steps=6, **kwargs) -> L.Trainer:
    return L.Trainer(
        default_root_dir=tmp_path,
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        plugins=[AtomicCheckpointIO()],
        **kwargs,
    )


def test_checkpoint_keeps_older_file_when_newer_write_fails(tmp_path, monkeypatch, caplog):
    class FailFromStep(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 3:
                fill_disk_after(monkeypatch, budget=100)

    ckpt = Checkpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=1)
    trainer = boring_trainer(tmp_path, [FailFromStep(), ckpt])
    with caplog.at_level(logging.WARNING, logger="lightning_lars.runtime.checkpointing"):
        trainer.fit(BoringModel())
    monkeypatch.undo()
    kept = [
        r.getMessage().split()[1].rstrip(":") for r in caplog.records if r.getMessage().startswith("keeping ")
    ]
    # step 4 failed: "keeping epoch0-step2"; step 6 failed too, and its predecessor step 4 was never written
    assert kept == [str(tmp_path / "ckpt" / "epoch0-step2.ckpt")]
    # saves at steps 2 (ok), 4 and 6 (disk full): plain ModelCheckpoint would have deleted step=2 at step 4
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["epoch0-step2.ckpt"]
    assert trainer.strategy.checkpoint_io.num_failed_writes == 2
    assert resume.load_meta(tmp_path / "ckpt" / "epoch0-step2.ckpt")["global_step"] == 2


class SignalAt(L.Callback):
    """Sends ``signums`` (default SIGUSR1), in this order, to this process in the middle of optimizer step
    ``step`` (inside the training step)."""

    def __init__(self, step: int, *signums: int):
        self.step, self.signums = step, signums or (signal.SIGUSR1,)

    def on_before_backward(self, trainer, pl_module, loss):
        if trainer.global_step == self.step:
            for signum in self.signums:
                os.kill(os.getpid(), signum)


def test_signal_checkpoints_at_next_step_boundary_and_stops(tmp_path, monkeypatch):
    outside_slurm(monkeypatch)
    trainer = boring_trainer(
        tmp_path,
        [SignalAt(2), SignalCheckpoint(), Checkpoint(dirpath=tmp_path / "ckpt")],
        max_steps=20,
        accumulate_grad_batches=2,
    )
    saved = tmp_path / "ckpt" / "signal-step3.ckpt"  # signal during step 2 -> saved once step 3 completed
    with pytest.raises(
        Preempted,
        match=f"resume with: {re.escape(sys.executable)} -m lightning_lars.train .*run.ckpt_path={saved}",
    ):
        trainer.fit(BoringModel())
    meta = resume.load_meta(saved)
    assert meta["global_step"] == 3
    progress = meta["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]
    # saved in on_train_batch_end of micro-batch 6: the state Lightning resumes exactly from
    assert progress["processed"] == 6 and progress["completed"] == 5
    assert signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None)  # Lightning restored the handlers


def test_resume_state_round_trips_rng_and_w_and_b_free_checkpoints(tmp_path):
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    trainer = boring_trainer(tmp_path, [ResumeState()], max_steps=2)
    trainer.fit(BoringModel())
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    expected = (torch.rand(4), np.random.rand(4), random.random())
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    checkpoint = torch.load(tmp_path / "a.ckpt", weights_only=True)  # Lightning's default loading mode
    ResumeState().on_load_checkpoint(trainer, trainer.lightning_module, checkpoint)
    drawn = (torch.rand(4), np.random.rand(4), random.random())
    assert (
        torch.equal(drawn[0], expected[0])
        and np.array_equal(drawn[1], expected[1])
        and drawn[2] == expected[2]
    )
    assert resume.WANDB_KEY not in checkpoint  # no W&B logger, no id


def test_ctrl_c_checkpoints_like_sigusr1_and_twice_stops_at_once(tmp_path, monkeypatch):
    outside_slurm(monkeypatch)
    # as in a terminal: an xdist worker, or a Lightning fit that ended on Ctrl-C earlier in it, leaves SIG_IGN
    signal.signal(signal.SIGINT, signal.default_int_handler)
    callbacks = [
        SignalAt(2, signal.SIGINT),
        SignalCheckpoint(signal_names=["SIGINT"]),
        Checkpoint(dirpath=tmp_path / "a"),
    ]
    with pytest.raises(Preempted, match="signal SIGINT at step 3") as stopped:
        boring_trainer(tmp_path, callbacks, max_steps=20).fit(BoringModel())
    assert stopped.value.exit_status == 130  # what a shell reports for a process Ctrl-C ended
    assert resume.load_meta(tmp_path / "a" / "signal-step3.ckpt")["global_step"] == 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C works as before after fit

    impatient = SignalAt(3, signal.SIGINT, signal.SIGINT)  # the second Ctrl-C ends the run without a save
    stopper = SignalCheckpoint(signal_names=["SIGINT"])
    trainer = boring_trainer(
        tmp_path,
        [impatient, stopper, Checkpoint(dirpath=tmp_path / "b", every_n_train_steps=2, save_top_k=-1)],
        max_steps=20,
    )
    try:
        with pytest.raises(SystemExit):  # Lightning's KeyboardInterrupt handling: graceful shutdown, exit 1
            trainer.fit(BoringModel())
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Lightning ignores SIGINT from then on
    assert not list((tmp_path / "b").glob("signal-*"))
    assert stopper.aborted  # the entry point turns Lightning's exit 1 into 130 with this line:
    message = stopper.abort_message(trainer)
    assert "stopped at step 3 without a save, losing the 1 step since the last checkpoint (step 2;" in message
    assert message.endswith(f"run.ckpt_path={tmp_path / 'b' / 'epoch0-step2.ckpt'}")


def test_a_preemption_signal_wins_over_sigterm_and_one_ctrl_c_after_it(tmp_path, monkeypatch):
    """SIGTERM, then SIGUSR1, then one Ctrl-C inside one step: the run stops for SIGUSR1 (a requeue, not the
    killed job's exit 143), and the single Ctrl-C does not abort the save."""
    outside_slurm(monkeypatch)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    three = SignalAt(2, signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
    callbacks = [three, SignalCheckpoint(), Checkpoint(dirpath=tmp_path / "ckpt")]
    try:
        with pytest.raises(Preempted, match="signal SIGUSR1 at step 3") as stopped:
            boring_trainer(tmp_path, callbacks, max_steps=20).fit(BoringModel())
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert stopped.value.exit_status == 0
    assert resume.load_meta(tmp_path / "ckpt" / "signal-step3.ckpt")["global_step"] == 3


def test_step_and_epoch_checkpoints_together_and_the_final_state(tmp_path):
    # BoringModel: 64 batches per epoch; 70 steps = 1 epoch + 6; steps every 20, every epoch, and the end
    ckpt = Checkpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=20, every_n_epochs=1, save_top_k=-1)
    boring_trainer(tmp_path, [ckpt], max_steps=70, limit_val_batches=0).fit(BoringModel())
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == [
        "epoch0-step20.ckpt",
        "epoch0-step40.ckpt",
        "epoch0-step60.ckpt",
        "epoch0-step64.ckpt",
        "epoch1-step70.ckpt",
    ]
    assert resume.load_meta(tmp_path / "ckpt" / "epoch1-step70.ckpt")["global_step"] == 70


def test_step_checkpoints_with_epochs_off_still_save_the_final_state(tmp_path):
    # with epochs off, the 10 steps after step 60 were never saved
    ckpt = Checkpoint(
        dirpath=tmp_path / "ckpt", every_n_train_steps=20, every_n_epochs=None, save_top_k=-1, save_last=True
    )
    boring_trainer(tmp_path, [ckpt], max_steps=70, limit_val_batches=0).fit(BoringModel())
    steps = sorted(resume.load_meta(p)["global_step"] for p in (tmp_path / "ckpt").glob("epoch*.ckpt"))
    assert steps == [20, 40, 60, 70]
    assert resume.load_meta(tmp_path / "ckpt" / "last.ckpt")["global_step"] == 70


def test_slurm_job_gets_one_run_folder_and_requeue_id(monkeypatch, tmp_path):
    outside_slurm(monkeypatch)
    assert preemption.run_dir_overrides(["recipe=demo"]) == [] and preemption.cluster_plugins() == []
    for name, value in SLURM_VARS.items():
        monkeypatch.setenv(name, value)
    assert preemption.requeue_job_id() == "4242"
    assert preemption.run_dir_overrides(["recipe=demo"]) == [
        "hydra.run.dir=${paths.log_dir}/${recipe_name}/runs/slurm-4242"
    ]
    assert preemption.run_dir_overrides(["hydra.run.dir=/x"]) == []  # the user's choice wins
    (plugin,) = preemption.cluster_plugins()
    assert plugin.auto_requeue and plugin.requeue_signal == signal.SIGUSR1
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert preemption.requeue_job_id() == "77_3"
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")  # an interactive allocation is not a batch job to requeue
    assert preemption.requeue_job_id() is None


def test_checkpoint_is_the_trainers_only_checkpoint_callback_and_runs_last(tmp_path):
    """Lightning's own bookkeeping is the oracle: it adds no ModelCheckpoint beside ours and runs ours after
    every other callback (so a DivergenceGuard raises before a diverged state is saved)."""
    ckpt = Checkpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2)
    trainer = boring_trainer(tmp_path, [ckpt, ResumeState()], max_steps=2, limit_val_batches=0)
    trainer.fit(BoringModel())
    assert trainer.checkpoint_callbacks == [ckpt] and trainer.checkpoint_callback is ckpt
    assert trainer.callbacks[-1] is ckpt and ckpt.dirpath == str(tmp_path / "ckpt")


def test_newest_file_kept_across_a_resume_but_never_the_one_resumed_from(tmp_path):
    folder = tmp_path / "ckpt"
    boring_trainer(
        tmp_path,
        [Checkpoint(dirpath=folder, every_n_train_steps=2, save_last=True)],
        max_steps=4,
        limit_val_batches=0,
    ).fit(BoringModel())
    assert sorted(p.name for p in folder.iterdir()) == ["epoch0-step4.ckpt", "last.ckpt"]
    resumed_from = folder / "epoch0-step4.ckpt"
    ckpt = Checkpoint(dirpath=folder, every_n_train_steps=2, save_last=True)
    resumed = boring_trainer(tmp_path, [ckpt], max_steps=8, limit_val_batches=0)
    resumed.fit(BoringModel(), ckpt_path=resumed_from)
    # step 6 replaced nothing (step 4 is the checkpoint the run resumed from); step 8 replaced step 6
    assert sorted(p.name for p in folder.iterdir()) == ["epoch0-step4.ckpt", "epoch0-step8.ckpt", "last.ckpt"]
    assert resume.load_meta(folder / "last.ckpt")["global_step"] == 8
    assert resume.load_meta(ckpt.best_model_path)["global_step"] == 8


def test_a_resumed_runs_wall_time_adds_the_earlier_attempts_from_the_checkpoint(tmp_path):
    folder = tmp_path / "ckpt"
    first = ResumeState()
    boring_trainer(
        tmp_path, [first, Checkpoint(dirpath=folder, save_last=True)], max_steps=4, limit_val_batches=0
    ).fit(BoringModel())
    saved = resume.load_meta(folder / "last.ckpt")[resume.WALL_KEY]
    assert 0 < saved <= first.run_wall_s()

    again = ResumeState()
    trainer = boring_trainer(tmp_path, [again], max_steps=8, limit_val_batches=0)
    before = time.perf_counter()
    trainer.fit(BoringModel(), ckpt_path=folder / "last.ckpt")
    this_attempt = time.perf_counter() - before
    assert saved < again.run_wall_s() <= saved + this_attempt  # the earlier attempt's time, then this one's
