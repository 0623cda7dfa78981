"""The finished run as plain data for the report: `run_record` reads the trainer, the module and the callbacks
that observed the run (their public state only) into a `lightning_lars.report.record.RunRecord`, so ``report``
needs nothing above its own layer."""

from __future__ import annotations

import functools
import math
import os

import lightning as L
import torch

from lightning_lars.callbacks import find_callback
from lightning_lars.callbacks.monitors.hparam_monitor import HParamMonitor
from lightning_lars.callbacks.monitors.run_history import RunHistory
from lightning_lars.callbacks.monitors.throughput import ThroughputCallback
from lightning_lars.callbacks.monitors.time_to_target import TimeToTarget
from lightning_lars.callbacks.monitors.trust_ratio import TrustRatioMonitor
from lightning_lars.callbacks.techniques.evaluation import planned_epochs
from lightning_lars.callbacks.techniques.weight_decay_follows_lr import WeightDecayFollowsLR
from lightning_lars.report.record import HParamSamples, RunRecord


def run_record(trainer: L.Trainer) -> RunRecord:
    """What ``trainer`` did, once fit (and the final validation) is over; the fields of callbacks it lacks
    stay empty."""
    throughput = find_callback(trainer, ThroughputCallback)
    history = find_callback(trainer, RunHistory)
    target = find_callback(trainer, TimeToTarget)
    trust = find_callback(trainer, TrustRatioMonitor)
    return RunRecord(
        steps=trainer.global_step,
        world_size=trainer.world_size,
        accelerator=type(trainer.accelerator).__name__,
        hardware=hardware_of(trainer),
        epochs=epochs_done(trainer),
        final_top1=_finite(trainer.callback_metrics.get("val/top1")),
        epoch_rows=tuple(dict(row) for row in history.epochs) if history is not None else (),
        throughput=throughput.summary(trainer.world_size) if throughput is not None else None,
        hparams=hparam_samples(trainer),
        target=target.record() if target is not None else None,
        trust=trust.record() if trust is not None else None,
    )


def hparam_samples(trainer: L.Trainer) -> HParamSamples | None:
    """The `HParamMonitor`'s applied values beside the plan: the module's LR schedule and, with
    `WeightDecayFollowsLR`, the weight decay it derives from it; None without the monitor."""
    monitor = find_callback(trainer, HParamMonitor)
    if monitor is None:
        return None
    module = trainer.lightning_module
    lr_schedule = getattr(module, "lr_schedule", None)
    keywords = getattr(getattr(module, "optimizer_factory", None), "keywords", {}) or {}
    base_weight_decay = keywords.get("weight_decay")
    follows = find_callback(trainer, WeightDecayFollowsLR)
    weight_decay_schedule = None
    if follows is not None and base_weight_decay is not None:
        weight_decay_schedule = functools.partial(
            follows.weight_decay_at, lr_schedule=lr_schedule, base_weight_decay=base_weight_decay
        )
    return HParamSamples(
        applied=tuple(monitor.history),
        total_steps=monitor.total_steps,
        lr_schedule=lr_schedule,
        weight_decay_schedule=weight_decay_schedule,
        base_weight_decay=base_weight_decay,
        base_momentum=keywords.get("momentum"),
    )


def hardware_of(trainer: L.Trainer) -> str:
    """``8 x NVIDIA H100 80GB HBM3`` or ``1 x CPU (2 cores)``: what the runs table names."""
    if trainer.strategy.root_device.type == "cuda":
        return f"{trainer.world_size} x {torch.cuda.get_device_name(trainer.strategy.root_device)}"
    return f"{trainer.world_size} x CPU ({os.cpu_count()} cores)"


def epochs_done(trainer: L.Trainer) -> float:
    """Epochs trained in the source's count (the plan's), else Lightning's passes over the loader."""
    epochs = planned_epochs(trainer, trainer.global_step)
    return float(trainer.current_epoch) if epochs is None else epochs


def _finite(value) -> float | None:
    value = float(value) if value is not None else math.nan
    return value if math.isfinite(value) else None
