"""Logs the learning rate, momentum and weight decay of every param group, as the optimizer will use them."""

from __future__ import annotations

import lightning as L


def group_label(index: int, group: dict) -> str:
    """A stable, readable name for a param group: its index and whether it is trust-adapted.

    ``param_groups.param_groups`` puts the adapted group (weight decay, trust ratio) first and the excluded
    one (BN, biases) second, so the labels read ``group0_adapted`` / ``group1_excluded``.
    """
    adapted = group.get("trust_adaptation")
    suffix = "" if adapted is None else ("_adapted" if adapted else "_excluded")
    return f"group{index}{suffix}"


def group_momentum(group: dict, optimizer=None) -> float | None:
    """SGD/LARS ``momentum``, Adam/LAMB's first-moment ``betas[0]``, or for an optimizer whose momentum follows
    its own step count (Neumann's mu(t)) ``optimizer.momentum_for_next_step()``; None when there is none."""
    if hasattr(optimizer, "momentum_for_next_step"):
        return float(optimizer.momentum_for_next_step())
    if "momentum" in group:
        return float(group["momentum"])
    if "betas" in group:
        return float(group["betas"][0])
    return None


class HParamMonitor(L.Callback):
    """Every ``every_n_steps`` optimizer steps, logs ``hparams/{lr,momentum,weight_decay}/<group>``.

    Read in ``on_before_optimizer_step``: after the schedule callback has set this step's LR (it runs at batch
    start) and once per optimizer step whatever the gradient accumulation. Keeps ``history``, a list of
    ``(step, epoch, lr, weight_decay, momentum)`` of group 0 for the run report's plots; it is saved in
    checkpoints so that a
    resumed run plots the whole schedule. Beyond ``max_history`` points every other point is dropped and the
    sampling interval doubles, so memory stays bounded on any run length.

    Args:
        every_n_steps: sampling interval in optimizer steps (None: the trainer's ``log_every_n_steps``).
        max_history: most points kept for the report.
    """

    def __init__(self, every_n_steps: int | None = None, max_history: int = 2000):
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps={every_n_steps} must be >= 1")
        self.every_n_steps = every_n_steps
        self.max_history = max_history
        self.history: list[tuple] = []  # (step, epoch, lr, weight_decay, momentum) of group 0
        self.total_steps: int | None = None  # optimizer steps planned for the run (for the report's LR plot)
        self._history_stride = 1  # multiples of every_n_steps kept in history (doubles when full)

    def on_fit_start(self, trainer, pl_module):
        if self.every_n_steps is None:
            self.every_n_steps = max(1, trainer.log_every_n_steps)

    def on_train_start(self, trainer, pl_module):
        # Read while the loaders are set up, on every rank: after fit Lightning would re-create the train loader
        # (with a barrier) to compute it, which rank 0 alone must not do.
        total = trainer.estimated_stepping_batches
        self.total_steps = int(total) if total != float("inf") else None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        step = trainer.global_step  # the step this optimizer call will take (0-based)
        if step % self.every_n_steps:
            return
        metrics = {}
        for index, group in enumerate(optimizer.param_groups):
            label = group_label(index, group)
            metrics[f"hparams/lr/{label}"] = float(group["lr"])
            metrics[f"hparams/weight_decay/{label}"] = float(group.get("weight_decay", 0.0))
            momentum = group_momentum(group, optimizer)
            if momentum is not None:
                metrics[f"hparams/momentum/{label}"] = momentum
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)
        if step % (self.every_n_steps * self._history_stride) == 0:
            first = optimizer.param_groups[0]
            self._record(
                step,
                epoch_of(trainer),
                float(first["lr"]),
                float(first.get("weight_decay", 0.0)),
                group_momentum(first, optimizer),
            )

    def _record(
        self,
        step: int,
        epoch: float,
        lr: float,
        weight_decay: float | None = None,
        momentum: float | None = None,
    ) -> None:
        if self.history and self.history[-1][0] >= step:
            return  # a resumed run replays no step twice
        self.history.append((step, epoch, lr, weight_decay, momentum))
        if len(self.history) > self.max_history:
            self._history_stride *= 2
            stride = self.every_n_steps * self._history_stride
            self.history = [h for h in self.history if h[0] % stride == 0]

    def state_dict(self):
        return {"history": list(self.history), "history_stride": self._history_stride}

    def load_state_dict(self, state_dict):
        self.history = [tuple(h) for h in state_dict["history"]]
        self._history_stride = state_dict["history_stride"]


def epoch_of(trainer) -> float:
    """Training progress in epochs (fractional): finished epochs plus the finished share of this one."""
    per_epoch = trainer.num_training_batches
    done = trainer.fit_loop.epoch_loop.batch_progress.current.completed
    if not per_epoch or per_epoch == float("inf"):
        return float(trainer.current_epoch)
    return trainer.current_epoch + min(done, per_epoch) / per_epoch
