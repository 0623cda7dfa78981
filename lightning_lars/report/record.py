"""What a finished run hands the report, as plain data: the callbacks' records and the trainer's counts.

The callbacks and the trainer stay above this layer: `lightning_lars.training.run_record` fills a
`RunRecord` from their public state once fit is over, and everything in ``report`` reads only the record. A
field a run did not record (its callback was left out) stays at its empty default, and the report says so
instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HParamSamples:
    """The learning rate, weight decay and momentum of param group 0, planned and applied.

    ``applied``: ``(step, epoch, lr, weight_decay, momentum)`` as the optimizer used them (momentum None for
    an optimizer without one). ``total_steps``: optimizer steps planned for the run (None: unknown).
    ``lr_schedule`` and ``weight_decay_schedule``: pure ``step -> value`` functions of the plan (None: none
    planned; weight decay then stays ``base_weight_decay``). ``base_*``: the optimizer's configured values.
    """

    applied: tuple[tuple, ...] = ()
    total_steps: int | None = None
    lr_schedule: Callable[[int], float] | None = None
    weight_decay_schedule: Callable[[int], float] | None = None
    base_weight_decay: float | None = None
    base_momentum: float | None = None

    def planned_weight_decay(self, step: int) -> float | None:
        if self.weight_decay_schedule is not None:
            return self.weight_decay_schedule(step)
        return self.base_weight_decay


@dataclass(frozen=True)
class TargetRecord:
    """MLPerf-style judging: ``evals`` are ``(epoch, step, top1 %, elapsed s)`` per evaluation inside fit;
    ``summary`` the ``target/*`` numbers for results.json and the W&B summary."""

    target_top1: float | None = None  # percent; None: evaluations recorded, no target
    evals: tuple[tuple[float, int, float, float], ...] = ()
    time_to_target_s: float | None = None
    epochs_to_target: float | None = None
    summary: dict[str, float] = field(default_factory=dict)

    @property
    def reached(self) -> bool:
        return self.time_to_target_s is not None


@dataclass(frozen=True)
class TrustRecord:
    """LARS/LAMB trust ratios: ``quantiles`` ``(step, {min, p25, median, p75, max})``; ``per_layer`` ``(step,
    [ratio per adapted tensor])``; ``last`` the newest snapshot (``step``, ``names``, ``w_norm``, ``g_norm``,
    ``trust_ratio`` lists), None before the first sample."""

    quantiles: tuple[tuple[int, dict[str, float]], ...] = ()
    per_layer: tuple[tuple[int, list[float]], ...] = ()
    last: dict | None = None


@dataclass(frozen=True)
class RunRecord:
    """One run's numbers for the results table, ``results.json``, ``report.png`` and the W&B summary.

    Args:
        steps: optimizer steps done.
        world_size: processes (devices) that trained.
        accelerator: the Lightning accelerator's class name (``CUDAAccelerator``), as the table shows it.
        hardware: ``8 x NVIDIA H100 80GB HBM3`` or ``1 x CPU (2 cores)``, as the runs table names it.
        epochs: epochs trained in the source's count (the plan's), else Lightning's passes over the loader.
        final_top1: the last ``val/top1`` (a fraction), None when there was no finite one.
        epoch_rows: one dict per finished training epoch and per evaluation (``epoch``, and some of
            ``train_loss``, ``val_loss``, ``val_top1`` in percent, ``images_per_sec``).
        throughput: whole-run ``perf/*`` numbers (``perf/images_per_sec`` over all devices,
            ``perf/data_wait_fraction``, ...); None without a throughput count.
        hparams: LR, weight decay and momentum samples; None when none were recorded.
        target: the evaluations and time to target; None when no one judged them.
        trust: per-layer trust ratios; None when none were recorded.
    """

    steps: int = 0
    world_size: int = 1
    accelerator: str = "-"
    hardware: str = "-"
    epochs: float = 0.0
    final_top1: float | None = None
    epoch_rows: tuple[dict[str, float], ...] = ()
    throughput: dict[str, float] | None = None
    hparams: HParamSamples | None = None
    target: TargetRecord | None = None
    trust: TrustRecord | None = None
