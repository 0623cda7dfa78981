"""Checkpoints that resume exactly: when to save, and what Lightning leaves out of a checkpoint.

- `Checkpoint`: saves every N steps and/or epochs, ``last.ckpt`` and the final state, on Lightning's public
  API only, and never deletes an older checkpoint after a failed write (written through
  `lightning_lars.runtime.checkpoint_io.AtomicCheckpointIO`).
- `ResumeState`: adds to every checkpoint what Lightning leaves out: the RNG states of every rank and the
  W&B run id (read back by `lightning_lars.runtime.resume` so the resumed run continues the same W&B run).

The save on a preemption signal lives in `lightning_lars.runtime.signal_checkpoint`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint as LightningCheckpoint
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn

from lightning_lars.runtime import rank_state, resume
from lightning_lars.runtime.checkpoint_io import checkpoint_io

log = logging.getLogger(__name__)


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
        # this step is saved already
        return (
            bool(trainer.fast_dev_run)
            or trainer.state.fn != TrainerFn.FITTING
            or trainer.sanity_checking
            or self._last_step_saved == trainer.global_step
        )

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
    would cover only the batches after the resume). Both are kept per rank; plus the W&B run id and the run's
    wall time so far, so that ``run_wall_s`` after a resume is the whole run's (every attempt's time from its
    fit start, without the time the job was down), as the time to the target is.
    """

    def __init__(self):
        self._pending_aggregates: dict | None = None  # logged-value sums to fold in after the first batch
        self._earlier_attempts_s = 0.0  # wall time up to the checkpoint this attempt resumed from
        self._fit_started: float | None = None

    def run_wall_s(self) -> float:
        """Seconds the run has trained and evaluated: this attempt since its fit began plus the earlier ones."""
        here = time.perf_counter() - self._fit_started if self._fit_started is not None else 0.0
        return self._earlier_attempts_s + here

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_started = time.perf_counter()

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        local = {
            "rng": rank_state.collect_rng_states(),
            "aggregates": rank_state.collect_epoch_aggregates(trainer, pl_module),
        }
        # every rank runs this hook (trainer.save_checkpoint is collective); rank 0's dict is the one written
        if distributed(trainer):  # Lightning strategies have no all_gather_object: use torch.distributed's
            gathered: list = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, local)
        else:
            gathered = [local]
        checkpoint[resume.PER_RANK_KEY] = gathered
        checkpoint[resume.WALL_KEY] = self.run_wall_s()
        run_id = wandb_run_id(trainer)
        if run_id:
            checkpoint[resume.WANDB_KEY] = run_id

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        self._earlier_attempts_s = float(checkpoint.get(resume.WALL_KEY, 0.0))
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
        rank_state.set_rng_states(mine["rng"])
        self._pending_aggregates = rank_state.restore_metric_states(pl_module, mine["aggregates"])

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._pending_aggregates is not None:  # the first batch after a resume has created the entries
            rank_state.fold_in_logged_sums(trainer, self._pending_aggregates)
            self._pending_aggregates = None


def distributed(trainer: L.Trainer) -> bool:
    return trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized()


def wandb_run_id(trainer: L.Trainer) -> str | None:
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger):
            return str(logger.version) if logger.version else None
    return None
