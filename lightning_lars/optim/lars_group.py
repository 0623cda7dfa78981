"""One LARS group's update: steps 1-3 of `LARS`'s order of operations over all of a group's tensors, eager
(a few ``torch._foreach_*`` ops) or through the compiled function (``optim.compiled.lars_update``), and the
per-tensor trust ratio of the eager path; the gradient norms a DDP comm hook took on the way.

Imports ``optim.compiled``, ``optim.flat``, ``optim.loss_scale``, ``optim.multi_tensor``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_lars.optim import loss_scale, multi_tensor
from lightning_lars.optim.compiled import Compiled
from lightning_lars.optim.flat import scratch_for

# a group's values a schedule may change between steps: 0-d tensors for the compiled function (optim.compiled)
HYPER_KEYS = ("lr", "momentum", "weight_decay", "trust_coefficient", "eps")


def hyper_values(group: dict) -> list[float]:
    """``lr, momentum, weight_decay, trust_coefficient, eps, wd_coefficient`` of ``group``, as ``hyper`` holds them."""
    return [*(group[k] for k in HYPER_KEYS), group.get("wd_coefficient", 1.0)]


def hooked_grad_norms(source, params: list[Tensor]) -> Tensor | None:
    """Per-parameter ``||g||`` from the DDP comm hook (``ddp_comm_state.compute_grad_norms``), or None.

    ``source`` (`LARS.grad_norm_source`) is set by `BucketedDDPStrategy`; every norm is popped, so a stale one
    from an earlier backward is never used, and the step falls back to its own pass if any is missing."""
    if source is None or not params:
        return None
    norms = [source.pop_grad_norm(p) for p in params]
    if any(n is None for n in norms):
        return None
    return torch.stack(norms).float()


def compiled_update(
    update_fn: Compiled,
    hyper: list[Tensor],
    group: dict,
    tensors: multi_tensor.GroupTensors,
    w_norm,
    g_norm,
    keep,
) -> Tensor | None:
    """Steps 1-3 for one group through ``update_fn`` (``hyper``: `hyper_values` as 0-d tensors); returns the
    trust ratios before LARC clipping, or None for a group that is not adapted (``w_norm`` None)."""
    if w_norm is not None:  # norms in the weights' dtype, as the eager path's trust ratio
        w_norm, g_norm = w_norm.to(hyper[0].dtype), g_norm.to(hyper[0].dtype)
    ratio = update_fn(
        tensors.weights,
        tensors.grads,
        tensors.state.get("momentum_buffer", []),
        w_norm,
        g_norm,
        hyper,
        group["form"],
        group["nesterov"],
        group["clip"],
        bool(group["weight_decay"]),
        bool(group["momentum"]),
        bool(group["eps"]),
        keep,
    )
    multi_tensor.write_back(tensors)
    return ratio


def eager_update(
    group: dict, tensors: multi_tensor.GroupTensors, ratio: Tensor | None, keep, scratch: dict, index: int
) -> None:
    """Steps 1-3 for one group with foreach ops; ``ratio``: its trust ratios (None: not adapted); ``keep`` (0-d,
    AMP only) is 0 on a step that must change nothing; ``scratch``: the optimizer's flat buffers (``optim.flat``),
    ``index`` the group's place among them."""
    lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
    fujitsu = group["form"] == "fujitsu"
    lr_inside = group["form"] != "nvidia"
    # 1. d = g + wd * w (fujitsu: lr * g + c * wd * w), a new list: p.grad stays untouched
    if fujitsu:
        d = torch._foreach_mul(tensors.grads, lr)
        if wd:
            torch._foreach_add_(d, tensors.weights, alpha=wd * group.get("wd_coefficient", 1.0))
    else:
        d = torch._foreach_add(tensors.grads, tensors.weights, alpha=wd) if wd else tensors.grads
    # 2. per-tensor buffer increment factor: trust (vector) or 1 (not adapted); LARC clips it
    scale: Tensor | float = 1.0
    spread = None  # an adapted group's per-tensor factors go through a scratch laid out like its weights
    if ratio is not None:  # with clip and lr == 0, ratio / lr is inf and clamps to 1 (apex LARC)
        scale = (ratio / lr).clamp(max=1.0) if group["clip"] else ratio
        spread = scratch_for(scratch, ("factor", index), tensors.weights)
    if lr_inside and not fujitsu:  # fujitsu: lr is already inside d
        scale = scale * lr
    out = -1.0 if lr_inside else -lr  # 3. factor from buffer to weight step
    if keep is not None:  # AMP: a skipped step adds nothing, keeps the buffer (mu -> 1) and the weights
        scale, out, mu = scale * keep, out * keep, loss_scale.kept(mu, keep) if mu else mu
    if group["momentum"]:  # not `mu`: a 0-d tensor's truth value would be a host read
        bufs = tensors.state["momentum_buffer"]
        torch._foreach_mul_(bufs, mu)
        multi_tensor.add_scaled_(bufs, scale, d, spread)
        if group["nesterov"]:
            multi_tensor.add_scaled_(tensors.weights, scale * out, d, spread)
            multi_tensor.add_scaled_(tensors.weights, out * mu, bufs)
        else:
            multi_tensor.add_scaled_(tensors.weights, out, bufs)
    else:
        multi_tensor.add_scaled_(tensors.weights, scale * out, d, spread)
    multi_tensor.write_back(tensors)


def trust_ratio(w_norm: Tensor, g_norm: Tensor, group: dict) -> Tensor:
    """``eta * ||w|| / (||g|| + wd * ||w|| + eps)`` per tensor, and 1 where either norm is 0 (form "fujitsu":
    where ``||w|| == 0``, as the FJSGD kernel applies any ratio > 0)."""
    denominator = g_norm + group["weight_decay"] * w_norm if group["weight_decay"] else g_norm
    if group["eps"]:
        denominator = denominator + group["eps"]
    ratio = group["trust_coefficient"] * w_norm / denominator
    valid = w_norm if group["form"] == "fujitsu" else torch.minimum(w_norm, g_norm)
    return torch.where(valid > 0, ratio, 1.0)
