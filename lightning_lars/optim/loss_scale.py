"""AMP's loss scale taken inside the optimizer step, as torch's fused SGD and AdamW take it: no host read.

``torch.amp.GradScaler.step`` reads ``found_inf`` back to the host (``.item()``, one sync per step) for every
optimizer that lacks ``_step_supports_amp_scaling``. For one that has it, the scaler runs its inf check, sets
``optimizer.grad_scale`` (the scale, or None once ``unscale_`` ran) and ``optimizer.found_inf`` (0-d fp32, 1
if any gradient is inf/NaN) and calls ``step()``, which must unscale and skip by itself (torch/amp/
grad_scaler.py). Lightning's ``MixedPrecision`` plugin then leaves ``unscale_`` to the optimizer too.

Here the gradients are divided by ``grad_scale`` into scratch (``p.grad`` is never written) and zeroed when
``found_inf`` is set, so everything the step computes from them stays finite; each optimizer then turns its
factors into identities with ``keep`` (1, or 0 on a skipped step) on the device: momentum 1, increments and
learning rate 0. A skipped step leaves weights, state and step counts as they were, as torch's fused kernels
do (they return before writing when ``found_inf`` is 1; here any nonzero value skips, as ``GradScaler.update``
backs off on any nonzero).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor
from torch.optim import Optimizer

from lightning_lars.optim.flat import scratch_for
from lightning_lars.optim.multi_tensor import GroupTensors


def scaler_inputs(opt: Optimizer) -> tuple[Tensor | None, Tensor | None]:
    """``(grad_scale, found_inf)`` as ``GradScaler.step`` set them on ``opt`` for this step (None outside)."""
    return getattr(opt, "grad_scale", None), getattr(opt, "found_inf", None)


def unscale(
    opt: Optimizer,
    work: list[tuple[dict, GroupTensors]],
    grad_scale: Tensor | None,
    found_inf: Tensor | None,
) -> tuple[list[tuple[dict, GroupTensors]], Tensor]:
    """Each group's gradients divided by ``grad_scale`` and zeroed if ``found_inf`` (new tensors: a flat
    scratch per group, three kernels; per tensor where the gradients cannot share one buffer), and ``skip``,
    a 0-d bool tensor on the device: True when this step must change nothing."""
    device = work[0][1].grads[0].device if work else torch.device("cpu")
    if found_inf is None:
        skip = torch.zeros((), dtype=torch.bool, device=device)
    else:
        skip = found_inf.to(device, non_blocking=True) != 0
    cache = opt.__dict__.setdefault("_flat", {})  # not saved: scratch only
    out = []
    for index, (group, tensors) in enumerate(work):
        flat = scratch_for(cache, ("grad", index), tensors.grads)
        if flat is not None:
            grads = flat.load(tensors.grads)
            if grad_scale is not None:
                flat.buffer.div_(grad_scale.to(flat.buffer.device, non_blocking=True))
            flat.buffer.masked_fill_(skip, 0)
        else:
            grads = tensors.grads
            if grad_scale is not None:
                grads = torch._foreach_div(grads, grad_scale.to(grads[0].device, non_blocking=True))
            grads = [torch.where(skip, 0, g) for g in grads]
        out.append((group, replace(tensors, grads=grads)))
    return out, skip


def keep_factor(skip: Tensor, like: Tensor) -> Tensor:
    """1 on a step that applies, 0 on a skipped one, in ``like``'s dtype (0-d, on the device)."""
    return (~skip).to(like.dtype)


def kept(value: float, keep: Tensor) -> Tensor:
    """``value`` when ``keep`` is 1, and 1 when it is 0 (a momentum or decay factor that leaves state as it was);
    exact in both cases."""
    return keep * value + (1.0 - keep)
