"""Checkpoints that are never lost and resume exactly: atomic writes, extra resume state, on-signal saves.

- `AtomicCheckpointIO`: writes ``.<name>.tmp-<pid>`` beside the target, fsyncs it, then ``os.replace``s it
  over the target. A failed write (ENOSPC, EIO, quota) removes the temp file, leaves the previous checkpoint
  as it was and says so in one counted warning; training goes on. Lightning's own ``_atomic_save`` stages
  the file in ``/tmp`` and moves it with ``shutil.move``, which is a copy onto the target (not atomic, no
  fsync) whenever ``/tmp`` and the run dir are different file systems, as on most clusters.
- `Checkpoint`: Lightning's ``ModelCheckpoint`` that never deletes an older checkpoint after a failed write.
- `ResumeState`: adds to every checkpoint what Lightning leaves out: the RNG states of every rank and the
  W&B run id (read back by `lightning_lars.runtime.resume` so the resumed run continues the same W&B run).
- `SignalCheckpoint`: on SIGUSR1 (our sbatch's warning before preemption, ``--signal=SIGUSR1@90``) or
  submitit's SIGUSR2, it saves at an optimizer-step boundary agreed by all ranks, then stops the run with
  `Preempted`. The requeue is Lightning's (``SLURMEnvironment(auto_requeue=True)``) or submitit's own handler,
  run at that boundary or after fit instead of inside the signal, where it would catch the step half done.
  A second instance on SIGINT makes Ctrl-C save the same way and print the resume command (twice: stop now).
"""

from __future__ import annotations

import functools
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

from lightning_lars.runtime import resume
from lightning_lars.runtime.preemption import Preempted, is_submitit_handler, preemption_signals, requeue_job_id

log = logging.getLogger(__name__)
# Lightning logs "`weights_only` was not set, defaulting to `False`." at every save without the argument, as
# its own SLURM requeue save does: our checkpoints are always full (exact resume). Only that record is dropped.
logging.getLogger("lightning.pytorch.trainer.connectors.checkpoint_connector").addFilter(
    lambda record: "`weights_only` was not set" not in record.getMessage())

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
    """On a preemption signal: checkpoint at an optimizer-step boundary all ranks agree on, then raise `Preempted`.

    Signals (`lightning_lars.runtime.preemption.preemption_signals`): SIGUSR1, what our sbatch asks for
    (``--signal=SIGUSR1@90``, Lightning's requeue signal), and submitit's (``SUBMITIT_PREEMPT_SIGNAL``, default
    USR2: hydra-submitit-launcher's jobs get ``--signal=USR2@<signal_delay_s>``). The handler only records the
    signal. Then, at the end of a batch that stepped the optimizer:

    - one process: checked at every step (a Python flag, no synchronisation);
    - distributed: every ``check_every_n_steps`` optimizer steps all ranks agree (one boolean all-reduce, the
      only host-device sync this callback makes), so a rank that got no signal stops at the same step.

    What follows the agreed stop, on every rank:

    - submitit's handler was in place (a hydra-submitit-launcher job): save ``signal-step<n>.ckpt`` in the
      checkpoint folder, then, after fit has unwound, submitit's own handler runs (`Preempted.then`): rank 0
      re-pickles the job and runs ``scontrol requeue``; the requeued job resumes from that checkpoint;
    - under SLURM with Lightning's requeue handler: that handler saves ``hpc_ckpt_<n>.ckpt`` in the run dir and
      runs ``scontrol requeue`` (we run it at the boundary instead of inside the signal, mid-step);
    - otherwise: save ``signal-step<n>.ckpt``; resume with ``run.ckpt_path=last``.

    Args:
        check_every_n_steps: optimizer steps between agreements when distributed (None: the trainer's
            ``log_every_n_steps``). The save starts within this many steps of the signal: keep N x step time
            well inside the warning (90 s).
        signal_names: the signals to catch (None: SIGUSR1 and submitit's).
    """

    def __init__(self, check_every_n_steps: int | None = None, signal_names: list[str] | None = None):
        if check_every_n_steps is not None and check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps={check_every_n_steps} must be >= 1")
        self.check_every_n_steps = check_every_n_steps
        self.signums = preemption_signals(signal_names)
        self.received: int | None = None
        self._displaced: dict[int, Any] = {}  # signal -> the handler ours replaced (Lightning's, submitit's)
        self._step_seen = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning registers its handlers right before training starts (submitit before the job runs), so
        # they are in place here.
        self._step_seen = trainer.global_step
        if self.check_every_n_steps is None:
            self.check_every_n_steps = max(1, trainer.log_every_n_steps)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.signums:
            current = signal.getsignal(signum)
            self._displaced[signum] = current if callable(current) else None
            signal.signal(signum, self._record)


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
            if trainer.global_step % self.check_every_n_steps:
                return
            received = trainer.strategy.reduce_boolean_decision(received, all=False)
        if received:
            self._stop(trainer)

    def _stop(self, trainer: L.Trainer) -> None:
        submitit_signum, submitit = next(((s, h) for s, h in self._displaced.items() if is_submitit_handler(h)),
                                         (None, None))
        signum = self.received or submitit_signum or self.signums[0]  # a rank without the signal acts alike
        name = signal.Signals(signum).name
        lightning = (self._displaced.get(signum) if signum != signal.SIGINT  # Ctrl-C: never a requeue
                     and not is_submitit_handler(self._displaced.get(signum)) else None)
        job_id = requeue_job_id()
        io = checkpoint_io(trainer)
        failed_before = io.num_failed_writes if io else 0
        then = None
        if submitit is None and lightning is not None and job_id is not None:
            lightning(signum, None)  # Lightning: save hpc checkpoint + scontrol requeue
            where, next_step = f"checkpoint in {trainer.default_root_dir}", f"SLURM job {job_id} requeued"
        else:
            folder = trainer.checkpoint_callback.dirpath if trainer.checkpoint_callback else trainer.default_root_dir
            path = Path(folder) / f"signal-step{trainer.global_step}.ckpt"
            trainer.save_checkpoint(path, weights_only=False)  # the full state: exact resume
            where = f"checkpoint {path}"
            if submitit is not None:
                next_step = "submitit requeues the job (rank 0), which resumes from it"
                then = functools.partial(submitit, signum, None)  # runs once fit has unwound
            else:
                next_step = f"resume with: {resume_command(path)}"
        if io and io.num_failed_writes > failed_before:  # disk full or gone: the older checkpoints still count
            where = f"checkpoint NOT written ({_one_line(io.last_error)}), the newest earlier one is used"
        raise Preempted(f"signal {name} at step {trainer.global_step}: {where}; {next_step}", then=then)

    def _restore_handlers(self) -> None:
        """Put back what we replaced, where ours is still in place (Lightning restores its own at teardown)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._displaced.items():
            if signal.getsignal(signum) == self._record:
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._displaced = {}

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore_handlers()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore_handlers()
        self.received = None


def resume_command(path: Path) -> str:
    """This run's command line with ``run.ckpt_path`` pointing at ``path`` (quoted for the shell)."""
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("run.ckpt_path=")]
    return shlex.join(["python", "-m", "lightning_lars.train", *args, f"run.ckpt_path={path}"])
