"""A recipe's run as `lightning_lars.recipe.plan.make_plan` plans it: every count in optimizer steps, every value a
pure function of the step; the training run, the recipe card and the golden tests read it.

Imports ``schedules``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from lightning_lars.schedules.batch_growth import BatchGrowth, GrownBatchSchedule
from lightning_lars.schedules.phases import LRSchedule
from lightning_lars.schedules.scaling import BatchPlan, counted


def epochs_done(epoch_end_steps: list[int], step: int) -> float:
    """Epochs done after ``step`` completed updates, fractional inside an epoch; past the last planned epoch
    (``max_steps`` beyond them), whole epochs of the last epoch's length."""
    ends = epoch_end_steps
    index = bisect.bisect_right(ends, step)
    if index >= len(ends):
        last = ends[-1] - (ends[-2] if len(ends) > 1 else 0)
        return len(ends) + (step - ends[-1]) / last
    start = ends[index - 1] if index else 0
    return index + (step - start) / (ends[index] - start)


@dataclass
class RecipePlan:
    """A recipe's run, planned: every count in optimizer steps, every value a pure function of the step."""

    recipe: str
    num_train_images: int
    epoch_mode: str
    epoch_mode_text: str  # how the epoch is counted, with the numbers
    steps_per_epoch: int
    epoch_end_steps: list[int]  # completed updates at the end of epoch 1, 2, ... (batch growth shortens some)
    total_steps: int  # where this run stops (a short run: trainer.max_steps)
    warmup_steps: int
    # where the schedule reaches its end value (normally total_steps; TF: one past the run)
    decay_end_step: int
    eval_steps: list[int]
    batch_plan: BatchPlan
    lr_schedule: LRSchedule | GrownBatchSchedule  # what update `step` uses (batch growth included)
    peak_lr: float
    deviations: list[dict] = field(default_factory=list)
    published: dict = field(default_factory=dict)
    value_hooks: list[Any] = field(default_factory=list)  # callbacks that set a hyperparameter per step
    batch_growth: BatchGrowth | None = None  # callbacks.batch_size_control's growth, on this plan's epochs
    base_weight_decay: float = 0.0
    base_momentum: float | None = None
    planned_steps: int = 0  # the full run the schedule spans (0: total_steps; more: a short run of it)

    def __post_init__(self) -> None:
        self.planned_steps = max(self.planned_steps, self.total_steps)

    @property
    def stops_early(self) -> bool:
        return self.total_steps < self.planned_steps

    @property
    def total_epochs(self) -> float:
        return self.epoch_at(self.total_steps)

    def epoch_at(self, step: int) -> float:
        """Epochs done after ``step`` completed updates, in the source's count (fractional inside an epoch)."""
        return epochs_done(self.epoch_end_steps, step)

    def values(self, step: int) -> dict[str, float]:
        """What update ``step`` uses: lr, weight_decay (the decayed group's), momentum, global_batch, ..."""
        values = {
            "lr": float(self.lr_schedule(step)),
            "weight_decay": self.base_weight_decay,
            "momentum": self.base_momentum,
            "global_batch": self.batch_plan.global_size,
        }
        if self.batch_growth is not None:  # the grown batch; the LR schedule is already the grown one
            values["global_batch"] *= self.batch_growth.at(step)[1]
        for hook in self.value_hooks:
            hook.planned_values(step, values, self)
        return values

    def lr(self, step: int) -> float:
        return self.values(step)["lr"]

    def weight_decay(self, step: int) -> float:
        return self.values(step)["weight_decay"]

    def momentum(self, step: int) -> float | None:
        return self.values(step)["momentum"]

    def global_batch(self, step: int) -> int:
        return self.values(step)["global_batch"]

    def summary(self) -> dict:
        """The plan as plain data, for the logger's hyperparameters and results.json."""
        return {
            "num_train_images": self.num_train_images,
            "epoch_mode": self.epoch_mode,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "total_epochs": self.total_epochs,
            "planned_steps": self.planned_steps,
            "warmup_steps": self.warmup_steps,
            "decay_end_step": self.decay_end_step,
            "eval_steps": list(self.eval_steps),
            "peak_lr": self.peak_lr,
            **{f"batch_{k}": v for k, v in self.batch_plan.__dict__.items()},
            "deviations": self.deviations,
        }

    def _decay_note(self) -> str:
        if self.decay_end_step > self.planned_steps:
            return " (past the last step: the LR never reaches its end value)"
        if self.decay_end_step < self.planned_steps:
            return f" (then flat to step {self.planned_steps})"
        return ""

    def describe(self) -> list[str]:
        """The plan lines `lightning_lars.training.run.build` prints and the recipe card repeats (a test keeps them
        equal)."""
        evals = self.eval_steps
        shown = ", ".join(map(str, evals if len(evals) <= 8 else [*evals[:4], "...", *evals[-3:]]))
        plural = "" if len(evals) == 1 else "s"
        planned_epochs = counted(self.epoch_at(self.planned_steps), "epoch", ".4g")
        lines = [
            f"plan: {self.batch_plan.describe()}",
            (
                f"plan: {self.steps_per_epoch} steps/epoch ({self.epoch_mode_text});"
                f" {counted(self.planned_steps, 'step')} = {planned_epochs};"
                f" warmup {counted(self.warmup_steps, 'step')}; LR decays until step {self.decay_end_step}"
                f"{self._decay_note()}; peak LR {self.peak_lr:.6g}"
            ),
            f"plan: {len(evals)} evaluation{plural}, after step{plural} {shown}",
        ]
        if self.stops_early:
            lines.append(
                f"plan: stops early after step {self.total_steps} of {self.planned_steps} (trainer.max_steps,"
                f" {counted(self.total_epochs, 'epoch', '.4g')}): LR and evaluations follow the full schedule,"
                f" the last evaluation at step {self.total_steps}"
            )
        lines += [
            f"deviation: {d['technique']}: published {d['published']}; ours {d['ours']} ({d['why']})"
            for d in self.deviations
        ]
        return lines
