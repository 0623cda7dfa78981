"""MLPerf-style judging: time and epochs from run start to the first evaluation at or above the target."""

from __future__ import annotations

import math
import time

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from lightning_lars.callbacks.monitors.hparam_monitor import epoch_of
from lightning_lars.callbacks.techniques.evaluation import planned_epochs

from lightning_lars.report.record import TargetRecord


class TimeToTarget(L.Callback):
    """Watches ``monitor`` after every validation; records the first time it reaches ``target_top1``.

    MLPerf's clock: ``run_start`` is taken at ``on_fit_start`` (model built, data opened, before the first
    training batch) and stops at the end of the first evaluation whose accuracy is at or above the target.
    Evaluations happen at the recipe's planned steps (``evaluation``, `callbacks.evaluation`; MLPerf ResNet
    evaluates every 4 epochs with an offset), so the target registers at exactly the evaluated step, and
    ``epochs_to_target`` is that step in the source's epochs. The clock counts training and evaluation wall time;
    a resumed run adds the time saved
    in the checkpoint, so the time covers the whole run but not the time the job was down.

    Logged (rank 0) at every evaluation: ``target/best_top1`` (percent) and, once reached,
    ``target/time_to_target_s``, ``target/epochs_to_target`` and ``target/reached`` = 1.
    ``evals`` keeps ``(epoch, step, top1 %, elapsed s)`` per evaluation for the run report.

    Args:
        target_top1: the target in percent, as recipes publish it (MLPerf ResNet-50: 75.9). None: only
            record the evaluations (no stopping, no time-to-target).
        monitor: the logged accuracy, a fraction in [0, 1] (``val/top1`` of the module).
        stop_at_target: end training at the first evaluation at or above the target (MLPerf ends there).
    """

    def __init__(
        self, target_top1: float | None = None, monitor: str = "val/top1", stop_at_target: bool = True
    ):
        if target_top1 is not None and not 0 < target_top1 <= 100:
            raise ValueError(f"target_top1={target_top1} must be a percentage in (0, 100], e.g. 75.9")
        self.target_top1 = target_top1
        self.monitor = monitor
        self.stop_at_target = stop_at_target
        self.evals: list[tuple[float, int, float, float]] = []
        self.time_to_target_s: float | None = None
        self.epochs_to_target: float | None = None
        self._elapsed_before_s = 0.0  # wall time of earlier attempts of this run (from the checkpoint)
        self._run_start: float | None = None

    @property
    def reached(self) -> bool:
        return self.time_to_target_s is not None

    def elapsed_s(self) -> float:
        """Run time so far: this attempt since ``on_fit_start`` plus the checkpointed earlier attempts."""
        here = time.perf_counter() - self._run_start if self._run_start is not None else 0.0
        return self._elapsed_before_s + here

    def on_fit_start(self, trainer, pl_module):
        self._run_start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        # Only evaluations inside fit count: an extra `trainer.validate` after training is no MLPerf eval.
        if (
            trainer.sanity_checking
            or trainer.state.fn != "fit"
            or self.monitor not in trainer.callback_metrics
        ):
            return
        top1 = 100.0 * float(trainer.callback_metrics[self.monitor])
        if not math.isfinite(top1):
            return
        elapsed, epoch = self.elapsed_s(), self._epoch(trainer)
        self.evals.append((epoch, trainer.global_step, top1, elapsed))
        metrics = {"target/best_top1": max(e[2] for e in self.evals)}
        if self.target_top1 is not None and not self.reached and top1 >= self.target_top1:
            self.time_to_target_s, self.epochs_to_target = elapsed, epoch
            metrics.update(
                {"target/time_to_target_s": elapsed, "target/epochs_to_target": epoch, "target/reached": 1.0}
            )
            rank_zero_info(
                f"[lightning-lars] target {self.target_top1:.2f} % reached: top-1 {top1:.2f} % at"
                f" epoch {epoch:.2f} (step {trainer.global_step}), {elapsed:.1f} s after run start"
            )
            if self.stop_at_target:
                trainer.should_stop = True
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    @staticmethod
    def _epoch(trainer) -> float:
        """Epochs at this evaluation in the source's count (the plan's), else Lightning's loader passes."""
        epochs = planned_epochs(trainer, trainer.global_step)
        return epoch_of(trainer) if epochs is None else epochs

    def summary(self) -> dict[str, float]:
        """What the report shows: target, whether and when it was reached, the best evaluation."""
        out = {"target/evals": float(len(self.evals))}
        if self.evals:
            out["target/best_top1"] = max(e[2] for e in self.evals)
        if self.target_top1 is not None:
            out["target/target_top1"] = self.target_top1
            out["target/reached"] = float(self.reached)
        if self.reached:
            out["target/time_to_target_s"] = self.time_to_target_s
            out["target/epochs_to_target"] = self.epochs_to_target
        return out

    def record(self) -> TargetRecord:
        """The evaluations and the time to target, as the run report reads them."""
        return TargetRecord(
            target_top1=self.target_top1,
            evals=tuple(self.evals),
            time_to_target_s=self.time_to_target_s,
            epochs_to_target=self.epochs_to_target,
            summary=self.summary(),
        )

    def state_dict(self):
        return {
            "elapsed_s": self.elapsed_s(),
            "evals": list(self.evals),
            "time_to_target_s": self.time_to_target_s,
            "epochs_to_target": self.epochs_to_target,
        }

    def load_state_dict(self, state_dict):
        self._elapsed_before_s = state_dict["elapsed_s"]
        self.evals = [tuple(e) for e in state_dict["evals"]]
        self.time_to_target_s = state_dict["time_to_target_s"]
        self.epochs_to_target = state_dict["epochs_to_target"]
