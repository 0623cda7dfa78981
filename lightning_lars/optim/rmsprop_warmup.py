"""PFN's RMSprop warm-up (Akiba, Suzuki, Fukuda 2017, https://arxiv.org/abs/1711.04325, sec. 3.1)."""

from __future__ import annotations

import torch
from torch.optim import Optimizer

from lightning_lars.core.errors import UserError
from lightning_lars.optim.param_groups import split_unresolved


class RMSpropWarmup(Optimizer):
    """Momentum SGD that starts as RMSprop and blends into plain SGD over the first epochs.

    Order of operations for every tensor ``w`` with raw gradient ``g`` (``p.grad`` is never modified)::

        d = g + wd * w                                           # 1. weight decay (L2 form, as Chainer's hook)
        m = alpha * m + (1 - alpha) * d^2                        # 2. RMSprop second moment
        a = group["sgd_fraction"]                                # 3. blend weight in [0, 1], set each step
        b = mu * b + lr * a * d + rmsprop_lr * (1 - a) * d / (sqrt(m) + eps)   # 4. both LRs inside the buffer
        w -= b

    ``a`` follows an ELU-shaped ramp in epochs (`lightning_lars.schedules.rmsprop_blend.SgdFractionElu`),
    applied by `lightning_lars.callbacks.techniques.rmsprop_warmup.RMSpropWarmupBlend`; a step without it is
    refused rather than silently pure SGD.
    Once ``a == 1`` this is momentum SGD with the LR inside the buffer (Chainer's MomentumSGD).

    Args:
        params: parameters or param groups (groups from ``param_groups`` carry their own ``weight_decay``;
            plain parameters are split by the ``ndim <= 1`` rule: BN and biases undecayed).
        lr: SGD learning rate (the schedule callback sets it before every step).
        rmsprop_lr: RMSprop learning rate (constant; default 3e-4).
        momentum: mu (default 0.9).
        alpha: RMSprop decay of the second moment (default 0.99).
        eps: RMSprop denominator guard (default 1e-8).
        weight_decay: wd (default 1e-4, as conf/optimizer/rmsprop_warmup.yaml).
    """

    def __init__(
        self,
        params,
        lr: float = 0.1,
        rmsprop_lr: float = 3e-4,
        momentum: float = 0.9,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 1e-4,
    ):
        for name, value in (("lr", lr), ("rmsprop_lr", rmsprop_lr), ("weight_decay", weight_decay)):
            if value < 0:
                raise ValueError(f"RMSpropWarmup {name}={value} is negative; set optimizer.{name} >= 0")
        if not 0.0 <= momentum < 1.0 or not 0.0 <= alpha < 1.0:
            raise ValueError(f"RMSpropWarmup momentum={momentum} and alpha={alpha} must lie in [0, 1)")
        if eps <= 0:
            raise ValueError(f"RMSpropWarmup eps={eps} must be > 0 (it guards sqrt(m) = 0)")
        defaults = {
            "lr": lr,
            "rmsprop_lr": rmsprop_lr,
            "momentum": momentum,
            "alpha": alpha,
            "eps": eps,
            "weight_decay": weight_decay,
            "sgd_fraction": None,
            "trust_adaptation": None,
        }
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        for part in split_unresolved(param_group, adapt_all=False):
            super().add_param_group(part)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            fraction = group["sgd_fraction"]
            if fraction is None:
                raise UserError(
                    "RMSpropWarmup needs its blend schedule: add callbacks.rmsprop_warmup"
                    " (_target_: lightning_lars.callbacks.techniques.rmsprop_warmup.RMSpropWarmupBlend) to the recipe"
                )
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                d = p.grad.add(p, alpha=group["weight_decay"]) if group["weight_decay"] else p.grad
                square_avg, buf = state["square_avg"], state["momentum_buffer"]
                square_avg.mul_(group["alpha"]).addcmul_(d, d, value=1 - group["alpha"])
                rms_step = d / (square_avg.sqrt() + group["eps"])
                buf.mul_(group["momentum"]).add_(d, alpha=group["lr"] * fraction)
                buf.add_(rms_step, alpha=group["rmsprop_lr"] * (1.0 - fraction))
                p.sub_(buf)
        return loss
