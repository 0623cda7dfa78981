"""Checkpoints that are never lost and resume exactly: atomic writes, extra resume state, on-signal saves.

- `AtomicCheckpointIO`: writes ``.<name>.tmp-<pid>`` beside the target, fsyncs it, then ``os.replace``s it
  over the target. A failed write (ENOSPC, EIO, quota) removes the temp file, leaves the previous checkpoint
  as it was and says so in one counted warning; training goes on. Lightning's own ``_atomic_save`` stages
  the file in ``/tmp`` and moves it with ``shutil.move``, which is a copy onto the target (not atomic, no
  fsync) whenever ``/tmp`` and the run dir are different file systems, as on most clusters.
- `Checkpoint`: Lightning's ``ModelCheckpoint`` that never deletes an older checkpoint after a failed write.
- `ResumeState`: adds to every checkpoint what Lightning leaves out: the RNG states of every rank and the
  W&B run id (read back by `lightning_lars.resume` so the resumed run continues the same W&B run).
- `SignalCheckpoint`: on SIGUSR1 (SLURM's warning before preemption, ``--signal=SIGUSR1@90``), or on Ctrl-C
  (a second instance on SIGINT; pressing it twice stops without a save), it saves at
  the next optimizer-step boundary, agreed by all ranks, then stops the run with `Preempted`. Under SLURM the
  save and the ``scontrol requeue`` are Lightning's own (``SLURMEnvironment(auto_requeue=True)``, whose
  handler we run at that boundary instead of inside the signal, where it would catch the step half done).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lightning_lars import resume
from lightning_lars.preemption import Preempted, requeue_job_id

log = logging.getLogger(__name__)

class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into a temp file in the target's folder + fsync + ``os.replace``: a reader sees the old
    checkpoint or the new one, never a partial file, even if the process dies or the disk fills mid-write."""

    def __init__(self) -> None:
        self.num_failed_writes = 0
        self.last_error: OSError | None = None

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):  # object stores (s3://, gs://) have no rename; fsspec's transaction is theirs
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        target = Path(path)
        temp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        writer = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(temp, "wb") as raw:
                writer = _KeepsWriteError(raw)
                torch.save(checkpoint, writer)
                raw.flush()
                os.fsync(raw.fileno())  # the bytes are on disk before the name points at them
            os.replace(temp, target)
            _fsync_dir(target.parent)  # ... and the new name survives a power cut
        except (OSError, RuntimeError) as error:
            temp.unlink(missing_ok=True)
            # torch's zip writer turns a failed write into "RuntimeError: unexpected pos ...": keep the OSError
            cause = writer.error if writer is not None and writer.error is not None else error
            self.num_failed_writes += 1
            self.last_error = cause if isinstance(cause, OSError) else OSError(_one_line(cause))
            log.warning(
                f"checkpoint {target} NOT written ({_one_line(cause)}); earlier checkpoints are untouched"
                f" ({self.num_failed_writes} failed checkpoint writes in this run); free disk space:"
                " training goes on and the next save tries again"
            )


class _KeepsWriteError:
    """A binary file for ``torch.save`` that remembers the OSError (ENOSPC, EIO) of a failed ``write``."""

    def __init__(self, raw):
        self.raw, self.error = raw, None

    def write(self, data) -> int:
        try:
            return self.raw.write(data)
        except OSError as error:
            self.error = error
            raise

    def flush(self) -> None:
        self.raw.flush()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems (e.g. some network mounts) refuse fsync on a directory: best effort
        pass
    finally:
        os.close(fd)


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def checkpoint_io(trainer: L.Trainer) -> AtomicCheckpointIO | None:
    io = trainer.strategy.checkpoint_io
    return io if isinstance(io, AtomicCheckpointIO) else None


class Checkpoint(ModelCheckpoint):
    """``ModelCheckpoint`` (same arguments) that keeps the older checkpoints when the newest write failed,
    takes ``every_n_train_steps`` and ``every_n_epochs`` together, and always saves the final state.

    - ``ModelCheckpoint`` deletes the previous top-k or ``last`` file right after saving a new one; after a
      failed write that deletion would leave no checkpoint at all. With `AtomicCheckpointIO` a failed write is
      counted, and here the deletion is skipped until a write succeeds again ("keeping <file>" names only a
      file that exists).
    - Lightning refuses both triggers at once; here each runs Lightning's own code path: the step trigger in
      ``on_train_batch_end``, the epoch trigger at epoch end (steps already saved are not saved twice).
    - The steps after the last save (``max_steps`` not a multiple of the interval, epochs off) are saved at the
      end of training, as top-k file and ``last``: a finished run's checkpoint is its final state.
    """

    def __init__(self, *args, filename: str | None = "epoch{epoch}-step{step}", auto_insert_metric_name: bool = False,
                 every_n_train_steps: int | None = None, every_n_epochs: int | None = None, **kwargs):
        # No "=" in our file names (Lightning's default is "epoch=0-step=4"): Hydra's override grammar rejects
        # an unquoted "=" in a value, so `run.ckpt_path=.../epoch=0-step=4.ckpt` would not even parse.
        both = bool(every_n_train_steps) and bool(every_n_epochs)
        super().__init__(*args, filename=filename, auto_insert_metric_name=auto_insert_metric_name,
                         every_n_train_steps=every_n_train_steps, every_n_epochs=None if both else every_n_epochs,
                         **kwargs)
        if both:  # Lightning validates one trigger in __init__; its epoch-end hooks read this attribute
            self._every_n_epochs = every_n_epochs
        self._last_write_failed = False

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        io = checkpoint_io(trainer)
        failed_before = io.num_failed_writes if io else 0
        super()._save_checkpoint(trainer, filepath)
        self._last_write_failed = bool(io) and io.num_failed_writes > failed_before

    def _remove_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        if not os.path.exists(filepath):  # its own write failed earlier: nothing to keep or remove
            return
        if self._last_write_failed:
            log.warning(f"keeping {filepath}: the newer checkpoint could not be written")
            return
        super()._remove_checkpoint(trainer, filepath)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._should_skip_saving_checkpoint(trainer):  # steps trained since the last save
            candidates = self._monitor_candidates(trainer)
            if self.monitor is None or self.monitor in candidates:
                self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
        super().on_train_end(trainer, pl_module)


class ResumeState(L.Callback):
    """Adds to each checkpoint what Lightning leaves out, so a resumed run matches an unbroken one bitwise.

    Lightning saves weights, optimizer, loop counters, callback and DataModule state (the data position). Not
    saved: RNG states (dropout, stochastic depth, mixup would draw differently) and the epoch's running
    aggregates (``on_epoch`` means such as ``train/loss`` and torchmetrics states such as ``train/top1``
    would cover only the batches after the resume). Both are kept per rank; plus the W&B run id.
    """

    def __init__(self):
        self._pending_aggregates: dict | None = None  # logged-value sums to fold in after the first batch

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        local = {"rng": resume.collect_rng_states(), "aggregates": resume.collect_epoch_aggregates(trainer, pl_module)}
        # every rank runs this hook (trainer.save_checkpoint is collective); rank 0's dict is the one written
        if _distributed(trainer):  # Lightning strategies have no all_gather_object: use torch.distributed's
            gathered: list = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, local)
        else:
            gathered = [local]
        checkpoint[resume.PER_RANK_KEY] = gathered
        run_id = wandb_run_id(trainer)
        if run_id:
            checkpoint[resume.WANDB_KEY] = run_id

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        per_rank = checkpoint.get(resume.PER_RANK_KEY)
        if not per_rank:
            return
        if len(per_rank) != trainer.world_size:
            log.warning(f"checkpoint holds {len(per_rank)} ranks' RNG states, this run has {trainer.world_size}:"
                        " RNG states and epoch aggregates not restored (weights and data position are)")
            return
        mine = per_rank[trainer.global_rank]
        resume.set_rng_states(mine["rng"])
        self._pending_aggregates = resume.restore_metric_states(pl_module, mine["aggregates"])

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._pending_aggregates is not None:  # the first batch after a resume has created the entries
            resume.fold_in_logged_sums(trainer, self._pending_aggregates)
            self._pending_aggregates = None


def _distributed(trainer: L.Trainer) -> bool:
    return trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized()


def wandb_run_id(trainer: L.Trainer) -> str | None:
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            return str(logger.version) if logger.version else None
    return None


class SignalCheckpoint(L.Callback):
    """On ``signal_name`` (default SIGUSR1): checkpoint at the next optimizer-step boundary, then raise `Preempted`.

    The signal handler only records the signal. At the end of the next training batch that stepped the
    optimizer, all ranks agree (one boolean all-reduce per step, only when distributed), then:
    under SLURM auto-requeue, Lightning's handler saves ``hpc_ckpt_<n>.ckpt`` in the run dir and runs
    ``scontrol requeue``; otherwise we save ``signal-step<n>.ckpt`` in the checkpoint folder. A checkpoint
    taken there is one Lightning resumes exactly (the same point as ``ModelCheckpoint(every_n_train_steps)``).
    """

    def __init__(self, signal_name: str = "SIGUSR1"):
        if not hasattr(signal, signal_name):
            raise ValueError(f"unknown signal {signal_name!r}")
        self.signum = getattr(signal, signal_name)
        self.received: int | None = None
        self._lightning_handler: Any = None
        self._previous_handler: Any = None  # put back after fit (Ctrl-C must work again in validate)
        self._step_seen = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning registers its handlers right before training starts, so they are in place here.
        self._step_seen = trainer.global_step
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(self.signum)
        self._lightning_handler = current if callable(current) else None
        self._previous_handler = current
        signal.signal(self.signum, self._record)

    def _restore_handler(self) -> None:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(self.signum) == self._record:
            signal.signal(self.signum, self._previous_handler if self._previous_handler is not None else signal.SIG_DFL)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_handler()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_handler()

    def _record(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:  # Ctrl-C twice: stop now, without a save
            raise KeyboardInterrupt
        self.received = signum

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if trainer.global_step == self._step_seen:  # mid-accumulation: the optimizer has not stepped yet
            return
        self._step_seen = trainer.global_step
        received = self.received is not None
        if _distributed(trainer):
            received = trainer.strategy.reduce_boolean_decision(received, all=False)
        if not received:
            return
        job_id = requeue_job_id()
        io = checkpoint_io(trainer)
        failed_before = io.num_failed_writes if io else 0
        name = signal.Signals(self.signum).name
        if self._lightning_handler is not None and job_id is not None:
            self._lightning_handler(self.signum, None)  # Lightning: save hpc checkpoint + scontrol requeue
            where, then = f"checkpoint in {trainer.default_root_dir}", f"SLURM job {job_id} requeued"
        else:
            folder = trainer.checkpoint_callback.dirpath if trainer.checkpoint_callback else trainer.default_root_dir
            path = Path(folder) / f"signal-step{trainer.global_step}.ckpt"
            trainer.save_checkpoint(path)
            where, then = f"checkpoint {path}", f"resume with: {resume_command(path)}"
        if io and io.num_failed_writes > failed_before:  # disk full or gone: the older checkpoints still count
            where = f"checkpoint NOT written ({_one_line(io.last_error)}), the newest earlier one is used"
        raise Preempted(f"signal {name} at step {trainer.global_step}: {where}; {then}")

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.received = None


def resume_command(path: Path) -> str:
    """This run's command line with ``run.ckpt_path`` pointing at ``path`` (quoted for the shell)."""
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("run.ckpt_path=")]
    return shlex.join(["python", "-m", "lightning_lars.train", *args, f"run.ckpt_path={path}"])
