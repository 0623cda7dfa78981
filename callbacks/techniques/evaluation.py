"""Validation at exactly the planned optimizer steps (MLPerf's eval every k epochs with an offset)."""

from __future__ import annotations

import lightning as L
from lightning_lars.callbacks import find_callback, is_log_step


class EvaluationSchedule(L.Callback):
    """Runs Lightning's own validation loop after exactly the updates in ``eval_steps`` (and nowhere else).

    Lightning's ``check_val_every_n_epoch`` cannot offset the first evaluation, and its epochs are loader
    passes, not the source's epochs. With ``check_val_every_n_epoch=None`` Lightning validates after a batch
    when ``(total_batch_idx + 1) % trainer.val_check_batch == 0``; before that test this callback sets
    ``val_check_batch`` to the current batch count when the batch just completed a planned update, and to
    one more than it otherwise. `lightning_lars.training.run.build_planned` builds the Trainer with it and the
    plan's steps (the last one is the final step).
    Stateless: a resumed run finds its place from ``trainer.global_step``.

    Args:
        eval_steps: completed-update counts after which to evaluate (`lightning_lars.recipe.plan`).
        epoch_at: ``step -> epochs`` in the source's count, for the logged ``train/epoch``.
        planned_steps: the full run's steps when this run stops early (``trainer.max_steps`` as a smoke test):
            progress reports epochs of the full run, not of the short one. None: the run is the plan.
    """

    def __init__(self, eval_steps: list[int], epoch_at=None, planned_steps: int | None = None):
        self.eval_steps = frozenset(int(s) for s in eval_steps)
        self.epoch_at = epoch_at
        self.planned_steps = planned_steps
        self._steps_seen = 0

    def setup(self, trainer, pl_module, stage):
        if trainer.check_val_every_n_epoch is not None:
            raise ValueError("EvaluationSchedule needs Trainer(check_val_every_n_epoch=None)")

    def _set_next(self, trainer, stepped_now: bool) -> None:
        batches_done = trainer.fit_loop.epoch_loop.total_batch_idx + 1
        due = stepped_now and trainer.global_step in self.eval_steps
        trainer.val_check_batch = max(1, batches_done) if due else batches_done + 1

    def on_train_start(self, trainer, pl_module):
        self._steps_seen = trainer.global_step
        # a resumed run asks "validate now?" once before its first batch: answer for where it stands
        self._set_next(trainer, stepped_now=False)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        stepped = trainer.global_step != self._steps_seen  # this micro-batch completed an optimizer update
        self._steps_seen = trainer.global_step
        self._set_next(trainer, stepped)
        if stepped and self.epoch_at is not None and is_log_step(trainer):
            pl_module.log(
                "train/epoch",
                float(self.epoch_at(trainer.global_step)),
                on_step=True,
                on_epoch=False,
                rank_zero_only=True,
            )


def planned_steps(trainer) -> int | None:
    """The full run's optimizer steps when this run stops early on its plan; else None."""
    schedule = find_callback(trainer, EvaluationSchedule)
    return None if schedule is None else schedule.planned_steps


def planned_epochs(trainer, step: int) -> float | None:
    """``step`` completed updates in the source's epochs, when the run follows a plan; else None."""
    schedule = find_callback(trainer, EvaluationSchedule)
    if schedule is None or schedule.epoch_at is None:
        return None
    return float(schedule.epoch_at(step))
