"""What each rank carries across a resume that Lightning's checkpoint leaves out: its RNG states (dropout,
stochastic depth, mixup draw the same after a resume) and the epoch's running aggregates (``on_epoch`` means
and torchmetrics states cover the whole epoch, not only the batches after the resume).

`lightning_lars.runtime.checkpointing.ResumeState` stores them per rank in every checkpoint and puts them back.
Imports torch, numpy, Lightning and torchmetrics only.
"""

from __future__ import annotations

import random
from typing import Any

import lightning as L
import numpy as np
import torch
from torchmetrics import Metric


def collect_rng_states() -> dict[str, Any]:
    """This process's RNG states as tensors, ints and tuples only: loadable with ``torch.load(weights_only=True)``,
    Lightning's default (a numpy array in a checkpoint makes that load fail)."""
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    states = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    saved = states["numpy"]
    np.random.set_state(
        (
            saved["name"],
            saved["keys"].numpy().astype(np.uint32),
            saved["pos"],
            saved["has_gauss"],
            saved["cached_gaussian"],
        )
    )
    version, internal_state, gauss_next = states["python"]
    random.setstate((version, tuple(internal_state), gauss_next))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, list):  # "cat" states of torchmetrics
        return [_cpu(v) for v in value]
    return value


def collect_epoch_aggregates(trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
    """The running epoch-level sums of ``self.log(..., on_epoch=True)`` values and every torchmetrics state."""
    logged = {}
    # Lightning has no public handle on the training epoch's logged values: its result collection it is.
    for key, result in trainer.fit_loop.epoch_loop._results.items():
        if result.is_tensor and result.meta.on_epoch and not result.has_reset:
            logged[key] = {
                "value": _cpu(result.value),
                "count": _cpu(getattr(result, "cumulated_batch_size", None)),
            }
    metrics = {
        name: {
            "states": {state: _cpu(getattr(module, state)) for state in module._defaults},
            "update_count": int(module._update_count),
        }
        for name, module in pl_module.named_modules()
        if isinstance(module, Metric)
    }
    return {"epoch": trainer.current_epoch, "logged": logged, "metrics": metrics}


def restore_metric_states(pl_module: L.LightningModule, aggregates: dict[str, Any]) -> dict[str, Any]:
    """Puts back the torchmetrics states now; returns ``aggregates`` for `fold_in_logged_sums` after batch one."""
    modules = dict(pl_module.named_modules())
    for name, saved in aggregates["metrics"].items():
        metric = modules.get(name)
        if not isinstance(metric, Metric):
            continue
        for state, value in saved["states"].items():
            setattr(metric, state, value)
        metric._update_count = saved["update_count"]
        metric._computed = None
    return aggregates


def fold_in_logged_sums(trainer: L.Trainer, aggregates: dict[str, Any]) -> None:
    """Adds the sums saved mid-epoch to the entries that the first resumed batch created.

    Exact: an entry then holds ``0 + x`` = ``x`` and ``x + saved`` equals the unbroken run's ``saved + x``
    bitwise (float addition commutes). Only within the epoch the checkpoint was taken in.
    """
    if trainer.current_epoch != aggregates["epoch"]:
        return
    results = trainer.fit_loop.epoch_loop._results
    for key, saved in aggregates["logged"].items():
        result = results.get(key)
        if result is None or not result.is_tensor:
            continue
        value = saved["value"].to(result.value.device, result.value.dtype)
        if result.meta.is_max_reduction:
            result.value = torch.maximum(result.value, value)
        elif result.meta.is_min_reduction:
            result.value = torch.minimum(result.value, value)
        else:  # mean and sum: running sums
            result.value = result.value + value
        if result.meta.is_mean_reduction and saved["count"] is not None:
            result.cumulated_batch_size = result.cumulated_batch_size + saved["count"].to(result.value.device)
