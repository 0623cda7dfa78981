"""Checkpoints that are never lost and resume exactly: atomic writes, extra resume state, on-signal saves.

- `AtomicCheckpointIO`: writes ``.<name>.tmp-<pid>`` beside the target, fsyncs it, then ``os.replace``s it
  over the target. A failed write (ENOSPC, EIO, quota) removes the temp file, leaves the previous checkpoint
  as it was and says so in one counted warning; training goes on. Lightning's own ``_atomic_save`` stages
  the file in ``/tmp`` and moves it with ``shutil.move``, which is a copy onto the target (not atomic, no
  fsync) whenever ``/tmp`` and the run dir are different file systems, as on most clusters.
- `Checkpoint`: saves every N steps and/or epochs, ``last.ckpt`` and the final state, on Lightning's public
  API only, and never deletes an older checkpoint after a failed write.
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
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint as LightningCheckpoint
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn

from lightning_lars.runtime import resume
from lightning_lars.runtime.preemption import (
    Preempted,
    is_submitit_handler,
    preemption_signals,
    requeue_job_id,
)

log = logging.getLogger(__name__)
# Lightning logs "`weights_only` was not set, defaulting to `False`." at every save without the argument, as
# its own SLURM requeue save does: our checkpoints are always full (exact resume). Only that record is dropped.
logging.getLogger("lightning.pytorch.trainer.connectors.checkpoint_connector").addFilter(
    lambda record: "`weights_only` was not set" not in record.getMessage()
)


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


class Checkpoint(LightningCheckpoint):
    """Saves the full training state every N optimizer steps and/or epochs, ``last.ckpt`` beside it, and
    always the final state; an older checkpoint is never deleted after a newer write failed.

    Built on Lightning's public API only (the ``Checkpoint`` base class, which Lightning runs after every
    other callback and returns as ``trainer.checkpoint_callback``; ``trainer.save_checkpoint``; the
    strategy's ``remove_checkpoint``), so a Lightning release cannot change it silently:

    - step trigger: at the end of a batch whose optimizer step count is a multiple of ``every_n_train_steps``;
      epoch trigger: at the end of every ``every_n_epochs``-th training epoch (or validation, see below); both
      may be on together, and a step already saved is not saved twice.
    - ``last.ckpt`` (``save_last``) is written whenever a top-k file is, and at the end.
    - the steps after the last save (``max_steps`` not a multiple of the interval, epochs off) are saved at
      the end of training, as top-k file and ``last``: a finished run's checkpoint is its final state.
    - with `AtomicCheckpointIO` a failed write is counted, and the file it should have replaced is kept
      ("keeping <file>" names only a file that exists) until a write succeeds again.

    Args:
        dirpath: folder of the checkpoints (None: ``<trainer.default_root_dir>/checkpoints``).
        filename: name of the top-k files, formatted with ``epoch`` and ``step``. No "=" in it: Hydra's
            override grammar rejects an unquoted "=" in a value, so `run.ckpt_path=.../epoch=0-step=4.ckpt`
            would not even parse.
        save_last: also write ``last.ckpt`` (overwritten, atomically) at every save.
        save_top_k: newest top-k files kept (-1: all; 0: none, ``last.ckpt`` only).
        every_n_train_steps: optimizer steps between saves (None or 0: off).
        every_n_epochs: training epochs between saves (None or 0: off; with both triggers None: 1).
        save_on_train_epoch_end: run the epoch trigger at the training epoch's end (True) or at the end of
            each validation (False); None: at the epoch's end when validation runs once per epoch or never.
    """

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename: str = "epoch{epoch}-step{step}",
        save_last: bool = False,
        save_top_k: int = 1,
        every_n_train_steps: int | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
    ):
        if save_top_k < -1:
            raise ValueError(
                f"save_top_k={save_top_k} must be -1 (all), 0 (last.ckpt only) or how many to keep"
            )
        for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
            if value is not None and value < 0:
                raise ValueError(f"{name}={value} must be >= 0 (0 or null: off)")
        try:
            filename.format(epoch=0, step=0)
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"filename={filename!r} may name only {{epoch}} and {{step}}") from error
        self.dirpath = str(dirpath) if dirpath is not None else None
        self.filename = filename
        self.save_last = save_last
        self.save_top_k = save_top_k
        if not every_n_train_steps and not every_n_epochs:
            every_n_epochs = 1  # as Lightning's ModelCheckpoint: no trigger given means every epoch
        self.every_n_train_steps = every_n_train_steps or 0
        self.every_n_epochs = every_n_epochs or 0
        self.save_on_train_epoch_end = save_on_train_epoch_end
        self.best_model_path = ""  # the newest top-k file (what DivergenceGuard names when save_last is off)
        self.last_model_path = ""
        self._kept: list[str] = []  # top-k files saved, oldest first
        self._last_step_saved = 0  # no save before the first optimizer step
        self._last_write_failed = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        dirpath = self.dirpath or os.path.join(trainer.default_root_dir, "checkpoints")
        self.dirpath = trainer.strategy.broadcast(dirpath)  # rank 0's folder on every rank

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        due = self.every_n_train_steps and trainer.global_step % self.every_n_train_steps == 0
        if due and not self._skip(trainer):
            self._save_top_k(trainer)
            self._save_last(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._on_train_epoch_end(trainer):
            self._epoch_trigger(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._on_train_epoch_end(trainer):
            self._epoch_trigger(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._skip(trainer):  # steps trained since the last save
            self._save_top_k(trainer)
            self._save_last(trainer)
        elif self.save_last and not self.last_model_path and not trainer.fast_dev_run:
            self._save_last(trainer)  # a run of no steps still leaves last.ckpt

    def state_dict(self) -> dict[str, Any]:
        return {
            "dirpath": self.dirpath,
            "kept": list(self._kept),
            "best_model_path": self.best_model_path,
            "last_model_path": self.last_model_path,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # the resumed run trims the files of the run it continues (only those in its own folder, see _remove)
        self._kept = list(state_dict.get("kept", []))
        self.best_model_path = state_dict.get("best_model_path", "")
        if state_dict.get("dirpath") == self.dirpath:
            self.last_model_path = state_dict.get("last_model_path", "")

    def _on_train_epoch_end(self, trainer: L.Trainer) -> bool:
        if self.save_on_train_epoch_end is not None:
            return self.save_on_train_epoch_end
        if trainer.check_val_every_n_epoch != 1:
            return False  # validation at its own interval: the epoch's end is no time to wait for it
        num_val_batches = trainer.num_val_batches
        num_val_batches = sum(num_val_batches) if isinstance(num_val_batches, list) else num_val_batches
        return num_val_batches == 0 or trainer.val_check_interval == 1.0

    def _epoch_trigger(self, trainer: L.Trainer) -> None:
        if self._skip(trainer):
            return
        if self.every_n_epochs and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self._save_top_k(trainer)
        if self._last_step_saved == trainer.global_step:  # last.ckpt only beside a new top-k file
            self._save_last(trainer)

    def _skip(self, trainer: L.Trainer) -> bool:
        return (
            bool(trainer.fast_dev_run)
            or trainer.state.fn != TrainerFn.FITTING
            or trainer.sanity_checking
            or self._last_step_saved == trainer.global_step
        )  # this step is saved already

    def _save_top_k(self, trainer: L.Trainer) -> None:
        if self.save_top_k == 0:
            return
        name = self.filename.format(epoch=trainer.current_epoch, step=trainer.global_step)
        path = os.path.join(self.dirpath, f"{name}.ckpt")
        self._save(trainer, path)
        self.best_model_path = path
        if path not in self._kept:
            self._kept.append(path)
        while self.save_top_k > 0 and len(self._kept) > self.save_top_k:
            self._remove(trainer, self._kept.pop(0))

    def _save_last(self, trainer: L.Trainer) -> None:
        if self.save_last:
            self.last_model_path = os.path.join(self.dirpath, "last.ckpt")
            self._save(trainer, self.last_model_path)

    def _save(self, trainer: L.Trainer, path: str) -> None:
        io = checkpoint_io(trainer)
        failed_before = io.num_failed_writes if io else 0
        trainer.save_checkpoint(path, weights_only=False)  # the full state: exact resume
        self._last_step_saved = trainer.global_step
        self._last_write_failed = bool(io) and io.num_failed_writes > failed_before

    def _remove(self, trainer: L.Trainer, path: str) -> None:
        """Delete an older top-k file, unless it is not ours (another folder, the checkpoint this run resumed)
        or the newer write failed."""
        resumed_from = Path(trainer.ckpt_path).absolute() if trainer.ckpt_path else None
        if (
            Path(self.dirpath).absolute() not in Path(path).absolute().parents
            or Path(path).absolute() == resumed_from
            or not os.path.exists(path)
        ):
            return  # not ours to delete, or its own write failed earlier: nothing to keep or remove
        if self._last_write_failed:
            log.warning(f"keeping {path}: the newer checkpoint could not be written")
            return
        trainer.strategy.remove_checkpoint(path)


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
        local = {
            "rng": resume.collect_rng_states(),
            "aggregates": resume.collect_epoch_aggregates(trainer, pl_module),
        }
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
            log.warning(
                f"checkpoint holds {len(per_rank)} ranks' RNG states, this run has {trainer.world_size}:"
                " RNG states and epoch aggregates not restored (weights and data position are)"
            )
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
    - distributed: about every ``check_every_s`` seconds all ranks agree, at a step boundary, in one all-reduce
      (the only host-device sync this callback makes) of (signal seen, steps until the next agreement): a rank
      that got no signal stops at the same step, and every rank picks the same next step, the fewest steps any
      rank measured to fill ``check_every_s``. Time, not a step count: with heavy accumulation 10 steps can
      outlast the warning. Where ``trainer.log_every_n_steps`` steps fit in that window, the next agreement is
      the last log step inside it, so the sync falls on a step that reads the device anyway (logging); only
      where one log interval outlasts ``check_every_s`` does it fall between log steps.

    What follows the agreed stop, on every rank:

    - submitit's handler was in place (a hydra-submitit-launcher job): save ``signal-step<n>.ckpt`` in the
      checkpoint folder, then, after fit has unwound, submitit's own handler runs (`Preempted.then`): rank 0
      re-pickles the job and runs ``scontrol requeue``; the requeued job resumes from that checkpoint;
    - under SLURM with Lightning's requeue handler: that handler saves ``hpc_ckpt_<n>.ckpt`` in the run dir and
      runs ``scontrol requeue`` (we run it at the boundary instead of inside the signal, mid-step);
    - otherwise: save ``signal-step<n>.ckpt``; resume with ``run.ckpt_path=last``.

    Args:
        check_every_s: seconds of training between agreements when distributed (0: at every step). The save
            starts within about this long, or one step if a step takes longer, after the signal: keep it well
            inside the warning (90 s), with the save's own time.
        signal_names: the signals to catch (None: SIGUSR1 and submitit's).
    """

    def __init__(self, check_every_s: float = 10.0, signal_names: list[str] | None = None):
        if not check_every_s >= 0:
            raise ValueError(f"check_every_s={check_every_s} must be >= 0 seconds")
        self.check_every_s = check_every_s
        self.num_agreements = 0  # all-reduces made (distributed only)
        self._next_check = 0  # the optimizer step at which all ranks agree next
        self._checked = (0, 0.0)  # (step, time.monotonic()) of the last agreement
        self.signums = preemption_signals(signal_names)
        self.received: int | None = None
        self._displaced: dict[int, Any] = {}  # signal -> the handler ours replaced (Lightning's, submitit's)
        self._step_seen = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning registers its handlers right before training starts (submitit before the job runs), so
        # they are in place here.
        self._step_seen = trainer.global_step
        self._next_check = trainer.global_step + 1  # the first agreement measures the first step's time
        self._checked = (trainer.global_step, time.monotonic())
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
            if trainer.global_step < self._next_check:
                return
            received = self._agree(trainer, received)
        if received:
            self._stop(trainer)

    def _agree(self, trainer: L.Trainer, received: bool) -> bool:
        """One all-reduce (max) of (signal seen, -steps to the next agreement): any rank's signal, and the
        fewest steps any rank measured to fill ``check_every_s``, so every rank agrees next at the same step."""
        step, now = trainer.global_step, time.monotonic()
        step_s = (now - self._checked[1]) / max(1, step - self._checked[0])
        steps = max(1, int(self.check_every_s / step_s)) if step_s > 0 else 1
        decision = torch.tensor([float(received), -float(steps)], device=trainer.strategy.root_device)
        torch.distributed.all_reduce(decision, op=torch.distributed.ReduceOp.MAX)
        seen, fewest = decision.tolist()  # one device-to-host copy
        self.num_agreements += 1
        window, log_every = int(-fewest), max(1, int(trainer.log_every_n_steps))
        # the same on every rank: the step and the window were agreed
        last_log_step = (step + window) // log_every * log_every
        self._next_check = last_log_step if last_log_step > step else step + window
        self._checked = (step, now)
        return seen > 0

    def _stop(self, trainer: L.Trainer) -> None:
        submitit_signum, submitit = next(
            ((s, h) for s, h in self._displaced.items() if is_submitit_handler(h)), (None, None)
        )
        signum = self.received or submitit_signum or self.signums[0]  # a rank without the signal acts alike
        name = signal.Signals(signum).name
        lightning = (
            self._displaced.get(signum)
            if signum not in (signal.SIGINT, signal.SIGTERM)  # Ctrl-C, scancel: never a requeue
            and not is_submitit_handler(self._displaced.get(signum))
            else None
        )
        job_id = requeue_job_id()
        io = checkpoint_io(trainer)
        failed_before = io.num_failed_writes if io else 0
        then = None
        if submitit is None and lightning is not None and job_id is not None:
            lightning(signum, None)  # Lightning: save hpc checkpoint + scontrol requeue
            where, next_step = f"checkpoint in {trainer.default_root_dir}", f"SLURM job {job_id} requeued"
        else:
            folder = (
                trainer.checkpoint_callback.dirpath
                if trainer.checkpoint_callback
                else trainer.default_root_dir
            )
            path = Path(folder) / f"signal-step{trainer.global_step}.ckpt"
            trainer.save_checkpoint(path, weights_only=False)  # the full state: exact resume
            where = f"checkpoint {path}"
            if submitit is not None:
                next_step = "submitit requeues the job (rank 0), which resumes from it"
                then = functools.partial(submitit, signum, None)  # runs once fit has unwound
            else:
                next_step = f"resume with: {resume_command(path)}"
        if (
            io and io.num_failed_writes > failed_before
        ):  # disk full or gone: the older checkpoints still count
            where = f"checkpoint NOT written ({_one_line(io.last_error)}), the newest earlier one is used"
        status = (
            128 + signal.SIGTERM if signum == signal.SIGTERM else 0
        )  # a killed job's status, as the shell's
        raise Preempted(
            f"signal {name} at step {trainer.global_step}: {where}; {next_step}",
            then=then,
            exit_status=status,
        )

    def _restore_handlers(self) -> None:
        """Put back what we replaced, where ours is still in place (Lightning restores its own at teardown)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._displaced.items():
            if signal.getsignal(signum) == self._record:
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._displaced = {}

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._restore_handlers()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore_handlers()
        self.received = None


def resume_command(path: Path) -> str:
    """This run's command line with ``run.ckpt_path`` pointing at ``path`` (quoted for the shell)."""
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("run.ckpt_path=")]
    # this interpreter: the project's venv, not whichever python comes first on the user's PATH
    return shlex.join([sys.executable, "-m", "lightning_lars.train", *args, f"run.ckpt_path={path}"])
