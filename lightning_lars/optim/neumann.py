"""Neumann optimizer (Krishnan, Xiao, Saurous 2017, https://arxiv.org/abs/1712.03298, ICLR 2018): the
practical Algorithm 2, with its SGD burn-in, cubic + repulsive regulariser, moving-average weights and the
reset of the Neumann iterate on a doubling period (Table 1).

Source read: the paper's ICLR 2018 text (sections 2-4, Algorithm 2, Tables 1-4). The authors' code was not
released (sec. 4: "We intend to open source our code at a later date"). Where the text leaves a choice, ours:
the regulariser's norm is over the whole weight vector (the paper's w is in R^n, and beta scales with n), not
per tensor; ``||w - v|| = 0`` drops the term (no direction); the unit of t in mu(t) is a parameter; L2 decay
is optional. Third-party ports (numpy, Keras, PyTorch) exist; none was used as a source."""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import Tensor

from lightning_lars.optim import multi_tensor
from lightning_lars.optim.layerwise import LayerwiseOptimizer
from lightning_lars.optim.norms import global_norms
from lightning_lars.optim.param_groups import shape


def momentum(t: int, mu_min: float, mu_max: float, time_unit: int) -> float:
    """mu(t) = clamp(1 - 1 / (1 + t / time_unit), mu_min, mu_max) at Neumann step t (1-based).

    Table 1: "mu proportional to (1 - 1/(1+t)), starting at mu = 0.5 and peaking at mu = 0.9"; the paper does
    not say in which unit t counts, so ``time_unit`` (steps) is ours: 1 reads t in steps, steps per epoch in
    epochs (mu reaches 0.5 after one unit and 0.9 after nine)."""
    return min(mu_max, max(mu_min, 1.0 - 1.0 / (1.0 + t / time_unit)))


def is_reset(t: int, first_period: int, growth: int) -> bool:
    """True at the Neumann steps t (1-based) that reset the iterate: t = 1, then every period after the last
    reset, the period starting at ``first_period`` steps and multiplied by ``growth`` after each reset.

    growth 1 is Algorithm 2 line 6 ("if t = 1 modulo K"); growth 2 is Table 1 ("K starts at 10 epochs, and
    doubles after every reset"). ``first_period`` 0 resets only at t = 1."""
    start, period = 1, first_period
    while start < t and period > 0:
        start, period = start + period, period * growth
    return start == t


class Neumann(LayerwiseOptimizer):
    """Neumann optimizer, Algorithm 2 of arXiv 1712.03298, with the hyperparameters of its Table 1.

    Order of operations at optimizer step s (1-based) with raw gradient ``g`` of every tensor ``w``
    (``p.grad`` is never modified); all tensors of all groups form the one vector w of the paper::

        g' = g + wd * w                       # 0. L2 decay (ours, default 0) on tensors the rule keeps
        if s <= sgd_steps: w -= lr * g'       # 1. SGD burn-in (line 2); m, v untouched
        t = s - sgd_steps                     #    Neumann step, 1-based
        if is_reset(t): m = -lr * g'          # 2. reset the Neumann iterate (line 7); w, v untouched
        else:
          r = ||w - v||                       # 3. one norm over all tensors
          d = g' + (alpha r^2 - beta n / r^2) (w - v) / r     # line 9 (term dropped while r = 0)
          m = mu(t) m - lr d                  # 4. line 10
          w = w + mu(t) m - lr d              # 5. line 11
          v = w + gamma (v - w)               # 6. line 12: moving average of the weights

    with v = w and m = 0 at the first step (line 1), n the number of scalar parameters (Table 1: "beta = 1e-5
    x num variables"), mu(t) from `momentum` and the resets from `is_reset`. The paper gives lines 9-12 after an
    ``else`` and no ``end if``: we read all four as the else branch, so a reset step moves no weight, as in
    Algorithm 1 where the reset computes m_0 and the inner loop moves the weights.

    Which weights the model holds: between steps the parameters are the *displaced* weights w of Algorithm 2,
    "actually the displaced parameters (w_t + mu m_t) in Equation (7)" (Section 3.2), and training computes
    its gradients there. The weights the algorithm returns (line 13) are ``w - mu(t) m``: evaluate with
    `evaluation_weights` (a context manager that swaps them in and restores the training weights exactly),
    as ``callbacks/techniques/neumann_evaluation.py`` does around validation.

    Args:
        params: parameters or param groups (a group without ``trust_adaptation`` is split by the exclusion
            rule of ``param_groups``, which only decides ``weight_decay`` here).
        lr: eta; the schedule callback overwrites ``group["lr"]`` before each step.
        alpha: cubic regulariser (Table 1: 1e-7).
        beta: repulsive regulariser per scalar parameter (Table 1: 1e-5; multiplied by n).
        gamma: moving-average parameter (Table 1: 0.99).
        mu_min, mu_max: momentum start and peak (Table 1: 0.5 and 0.9).
        momentum_time_unit: steps per unit of t in mu(t) (see `momentum`; the paper gives none).
        sgd_steps: steps of plain SGD first (Table 1: 5 epochs).
        reset_steps: first period between resets, in steps (Table 1: 10 epochs); 0 resets only once.
        reset_growth: factor on the period after each reset (Table 1: 2; Algorithm 2 as printed: 1).
        weight_decay: L2 decay added to g (the paper states none; TF models carry it in the loss).
        shard_group: as for ``LARS`` (FSDP1 flat shards only): the group ||w - v|| is summed over.
    """

    def __init__(
        self,
        params,
        lr: float = 0.1,
        alpha: float = 1e-7,
        beta: float = 1e-5,
        gamma: float = 0.99,
        mu_min: float = 0.5,
        mu_max: float = 0.9,
        momentum_time_unit: int = 1,
        sgd_steps: int = 0,
        reset_steps: int = 0,
        reset_growth: int = 2,
        weight_decay: float = 0.0,
        shard_group: dist.ProcessGroup | None = None,
    ):
        checks = {
            "lr": lr >= 0,
            "alpha": alpha >= 0,
            "beta": beta >= 0,
            "gamma": 0 <= gamma < 1,
            "mu_min": 0 <= mu_min <= mu_max,
            "mu_max": 0 <= mu_max < 1,
            "momentum_time_unit": momentum_time_unit >= 1,
            "sgd_steps": sgd_steps >= 0,
            "reset_steps": reset_steps >= 0,
            "reset_growth": reset_growth >= 1,
            "weight_decay": weight_decay >= 0,
        }
        limits = {
            "gamma": "in [0, 1)",
            "mu_min": "in [0, mu_max]",
            "mu_max": "in [0, 1)",
            "momentum_time_unit": ">= 1 (steps)",
            "reset_growth": ">= 1",
        }
        for key, ok in checks.items():
            if not ok:
                value = locals()[key]
                raise ValueError(
                    f"Neumann {key}={value} must be {limits.get(key, '>= 0')}; set optimizer.{key}"
                )
        for key in ("momentum_time_unit", "sgd_steps", "reset_steps", "reset_growth"):
            if int(locals()[key]) != locals()[key]:
                raise TypeError(f"Neumann {key}={locals()[key]} must be a whole number; set optimizer.{key}")
        defaults = {"lr": lr, "weight_decay": weight_decay, "trust_adaptation": None}
        self.alpha, self.beta, self.gamma = alpha, beta, gamma
        self.mu_min, self.mu_max, self.momentum_time_unit = mu_min, mu_max, int(momentum_time_unit)
        self.sgd_steps, self.reset_steps, self.reset_growth = (
            int(sgd_steps),
            int(reset_steps),
            int(reset_growth),
        )
        self.shard_group = shard_group
        super().__init__(params, defaults)
        self.num_scalars = sum(shape(p).numel() for group in self.param_groups for p in group["params"])

    def add_param_group(self, param_group: dict) -> None:
        """Add a group with its own step count, 0 unless it brings one: the count is each group's first key
        (checkpoints hold it there), not a default, which torch would add after the group's own keys."""
        super().add_param_group({"step": 0, **param_group})

    @property
    def neumann_step(self) -> int:
        """t of the last step: steps taken after the SGD burn-in (0 during it)."""
        return max(0, self.param_groups[0]["step"] - self.sgd_steps)

    def momentum_for_next_step(self) -> float:
        """The momentum mu(t) that the next `step` applies (lines 10-11), for the monitors: 0 during the SGD
        burn-in and on a reset step, which move no weight through m."""
        t = self.param_groups[0]["step"] + 1 - self.sgd_steps
        if t <= 0 or is_reset(t, self.reset_steps, self.reset_growth):
            return 0.0
        return momentum(t, self.mu_min, self.mu_max, self.momentum_time_unit)

    @torch.no_grad()
    def step(self, closure=None):
        """One step of Algorithm 2 for every group; returns the closure's loss if one is given."""
        loss = self.closure_loss(closure)
        fresh = {
            id(p) for g in self.param_groups for p in g["params"] if p.grad is not None and not self.state[p]
        }
        work = multi_tensor.collect_groups(self, lambda group: ("neumann_iterate", "moving_average"))
        if fresh:  # line 1: v_0 = w_0 for every tensor seen for the first time (m_0 = 0 from collect)
            for _group, tensors in work:
                for p, w, v in zip(tensors.params, tensors.weights, tensors.state["moving_average"]):
                    if id(p) in fresh:
                        v.copy_(w)
        for group in self.param_groups:
            group["step"] += 1
        s = self.param_groups[0]["step"]
        grads = [self._decayed_grad(group, tensors) for group, tensors in work]
        t = s - self.sgd_steps
        if t <= 0:  # line 2: SGD burn-in
            for (group, tensors), g in zip(work, grads):
                torch._foreach_add_(tensors.weights, g, alpha=-group["lr"])
                multi_tensor.write_back(tensors)
            return loss
        if is_reset(t, self.reset_steps, self.reset_growth):  # line 7
            for (group, tensors), g in zip(work, grads):
                torch._foreach_copy_(tensors.state["neumann_iterate"], g)
                torch._foreach_mul_(tensors.state["neumann_iterate"], -group["lr"])
            return loss
        self._neumann_update(work, grads, momentum(t, self.mu_min, self.mu_max, self.momentum_time_unit))
        return loss

    @staticmethod
    def _decayed_grad(group: dict, tensors: multi_tensor.GroupTensors) -> list[Tensor]:
        """g' = g + wd * w: new tensors when wd != 0, else the gradients themselves (read only)."""
        if not group["weight_decay"]:
            return tensors.grads
        return torch._foreach_add(tensors.grads, tensors.weights, alpha=group["weight_decay"])

    def _neumann_update(
        self, work: list[tuple[dict, multi_tensor.GroupTensors]], grads: list[list[Tensor]], mu: float
    ):
        """Lines 9-12 for all groups: one norm ||w - v|| over every tensor, then elementwise updates."""
        diffs = [torch._foreach_sub(t.weights, t.state["moving_average"]) for _, t in work]
        params = [p for _, t in work for p in t.params]
        order = multi_tensor.sharded_order(self, lambda group: True)
        (_, total) = global_norms(
            [[x for d in diffs for x in d]], params, self.shard_group, order, totals=True
        )
        r = total[0]
        beta = self.beta * self.num_scalars
        # (alpha r^2 - beta / r^2) / r, a 0-d tensor on the device (no sync); 0 while w = v (no direction)
        safe_r = torch.where(r > 0, r, torch.ones_like(r))
        coefficient = torch.where(
            r > 0, (self.alpha * safe_r**2 - beta / safe_r**2) / safe_r, torch.zeros_like(r)
        )
        for (group, tensors), g, diff in zip(work, grads, diffs):
            lr, m, v = group["lr"], tensors.state["neumann_iterate"], tensors.state["moving_average"]
            d = torch._foreach_mul(diff, coefficient)  # line 9: d = g' + c (w - v)
            torch._foreach_add_(d, g)
            torch._foreach_mul_(m, mu)  # line 10: m = mu m - lr d
            torch._foreach_add_(m, d, alpha=-lr)
            torch._foreach_add_(tensors.weights, m, alpha=mu)  # line 11: w += mu m - lr d
            torch._foreach_add_(tensors.weights, d, alpha=-lr)
            torch._foreach_lerp_(v, tensors.weights, 1.0 - self.gamma)  # line 12: v = w + gamma (v - w)
            multi_tensor.write_back(tensors)

    @contextmanager
    def evaluation_weights(self):
        """Hold the returned weights ``w - mu(t) m`` (line 13, t the last Neumann step) in the parameters
        inside the block, then copy the displaced training weights back bit for bit. Before the first
        Neumann step (during the SGD burn-in) m = 0 and nothing changes; right after a reset m is the reset
        iterate ``-lr g`` and line 13 applies to it as written."""
        t = self.neumann_step
        params = [p for g in self.param_groups for p in g["params"] if "neumann_iterate" in self.state[p]]
        if t == 0 or not params:
            yield
            return
        mu = momentum(t, self.mu_min, self.mu_max, self.momentum_time_unit)
        saved = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p in params:
                p.sub_(self.state[p]["neumann_iterate"].to(p.dtype), alpha=mu)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_([p.detach() for p in params], saved)
