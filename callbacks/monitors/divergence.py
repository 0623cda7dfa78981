"""Stops a diverged run with one line naming the step, and never lets it write a checkpoint."""

from __future__ import annotations

import math

import lightning as L
import torch

from lightning_lars.core.errors import UserError


class DivergenceError(UserError):
    """The loss became NaN/inf or exploded. A UserError: the entry point prints it as one line."""


class DivergenceGuard(L.Callback):
    """Watches the training loss; a non-finite value or an explosion raises `DivergenceError`.

    Explosion: the mean loss of the last check window exceeds ``explosion_factor`` times the lowest window mean
    seen so far, once ``min_steps`` optimizer steps are done. Losses are summed on the device between checks,
    so a check costs one host sync every ``check_every_n_steps`` optimizer steps, not one per batch. All ranks
    agree at each check (one all-reduce of a flag), so every rank raises at the same step.

    Contract with checkpointing (the last good checkpoint is kept):
    - raising inside fit aborts before any later checkpoint hook runs: Lightning runs ``ModelCheckpoint`` after
      every other callback, and writes nothing on an exception;
    - every checkpoint save calls ``on_save_checkpoint`` here first (on all ranks, as
      ``trainer.save_checkpoint`` requires): it checks the losses since the last check and that every weight
      is finite, and raises before the file is written if not. So a diverged state is never saved, also
      not by a save-on-exception or save-on-signal callback (which should skip `DivergenceError` anyway).

    Args:
        check_every_n_steps: optimizer steps between checks (None: the trainer's ``log_every_n_steps``).
        explosion_factor: window mean / best window mean that counts as an explosion (None: only NaN/inf).
        min_steps: optimizer steps before explosions are judged (the first steps' loss is noisy).
    """

    def __init__(
        self,
        check_every_n_steps: int | None = None,
        explosion_factor: float | None = 3.0,
        min_steps: int = 100,
    ):
        if explosion_factor is not None and explosion_factor <= 1:
            raise ValueError(f"explosion_factor={explosion_factor} must be > 1")
        self.check_every_n_steps = check_every_n_steps
        self.explosion_factor = explosion_factor
        self.min_steps = min_steps
        self.best_window_loss = math.inf
        self.diverged: str | None = None  # the message, once diverged
        self._sum: torch.Tensor | None = None  # device-side sum of this window's micro-batch losses
        self._count = 0
        self._last_checked_step = -1
        self._first_bad_step = torch.tensor(-1)
        self._batch_step = 0
        self._window_first_step = 0

    def on_fit_start(self, trainer, pl_module):
        if self.check_every_n_steps is None:
            self.check_every_n_steps = max(1, trainer.log_every_n_steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._batch_step = trainer.global_step  # the optimizer step this micro-batch's gradient goes into

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        # Lightning hands back the loss divided by the accumulation count; undo it to judge the real loss.
        loss = loss.detach().float() * trainer.accumulate_grad_batches
        step = self._batch_step
        if self._sum is None:
            self._window_first_step = step
        self._sum = loss if self._sum is None else self._sum + loss  # NaN/inf propagate into the sum
        # Device-side record of the first step with a non-finite loss: the message names it exactly even
        # when the check comes later, and recording it needs no host sync.
        if self._first_bad_step.device != loss.device:  # once: a per-batch copy from host memory would sync
            self._first_bad_step = self._first_bad_step.to(loss.device)
        first = self._first_bad_step
        self._first_bad_step = torch.where(~torch.isfinite(loss) & (first < 0), step, first)
        self._count += 1
        step = trainer.global_step  # steps done: check once every check_every_n_steps of them
        if step != self._last_checked_step and step % self.check_every_n_steps == 0:
            self._check(trainer, pl_module, check_weights=False)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if self.diverged is None:
            self._check(trainer, pl_module, check_weights=True)
        if self.diverged is not None:
            raise DivergenceError(self.diverged)

    def _check(self, trainer, pl_module, check_weights: bool) -> None:
        self._last_checked_step = trainer.global_step
        count = self._count
        window = float(self._sum) / count if count else None  # the one host sync
        self._sum, self._count = None, 0
        problem, step = None, trainer.global_step - 1  # default: the last step taken (0-based)
        if window is not None and not math.isfinite(window):
            first = int(self._first_bad_step)
            step = first if first >= 0 else step
            problem = f"loss is {window}"
        elif check_weights and not _weights_finite(pl_module):
            problem = "weights are NaN/inf"
        elif (
            window is not None
            and self.explosion_factor is not None
            and trainer.global_step >= self.min_steps
            and window > self.explosion_factor * self.best_window_loss
        ):
            first, last = self._window_first_step, self._batch_step
            step = first
            steps = f"step {first}" if first == last else f"steps {first}-{last}"
            problem = (
                f"loss exploded to {window:.4g} (mean of {steps}),"
                f" over {self.explosion_factor:g} x the best window's {self.best_window_loss:.4g}"
            )
        elif window is not None:
            self.best_window_loss = min(self.best_window_loss, window)
        # Any rank in trouble stops every rank, at the same step.
        if not trainer.strategy.reduce_boolean_decision(problem is not None, all=False):
            return
        self.diverged = _message(trainer, step, problem or "another rank's loss diverged")
        raise DivergenceError(self.diverged)

    def state_dict(self):
        return {"best_window_loss": self.best_window_loss}

    def load_state_dict(self, state_dict):
        self.best_window_loss = state_dict["best_window_loss"]


def _weights_finite(pl_module) -> bool:
    """True when every parameter (this rank's shard, for DTensors) is finite; one sync for all tensors."""
    flags = [
        torch.isfinite(p.to_local() if hasattr(p, "to_local") else p).all() for p in pl_module.parameters()
    ]
    return bool(torch.stack(flags).all()) if flags else True


def _message(trainer, step: int, problem: str) -> str:
    """One line: the step (0-based, as ``trainer/global_step`` in the logs), what went wrong, what is kept."""
    callback = trainer.checkpoint_callback
    last = getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "")
    keep = (
        f"last good checkpoint: {last} (resume with run.ckpt_path={last})"
        if last
        else "no checkpoint had been saved"
    )
    return (
        f"training diverged at step {step} (epoch {trainer.current_epoch}): {problem};"
        f" {keep}; lower the peak LR (scheduler.base_lr) or lengthen the warmup (scheduler.warmup_epochs)"
    )
