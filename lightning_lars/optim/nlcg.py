"""NLCG: preconditioned nonlinear conjugate gradients for large-batch training (Adya, Palakkode, Tuzel 2018,
"Nonlinear Conjugate Gradients For Scaling Synchronous Distributed DNN Training", https://arxiv.org/abs/1812.02886).

The paper's text beyond its abstract was not reachable through our tools; the algorithm follows the authors'
code, apple/ml-ncg at 563b5e5: ``ncg/optimization/optimization/ncg_core_tfop.py`` (cited below as ``core``),
``altopt_tf.py`` and ``altopt_core.py``, read line by line.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
from torch import Tensor

from lightning_lars.optim import multi_tensor
from lightning_lars.optim.dots import global_dots
from lightning_lars.optim.flat import scratch_for
from lightning_lars.optim.layerwise import LayerwiseOptimizer
from lightning_lars.optim.nlcg_line_search import BASE_LR, LOSS_EMA, LOSS_EMA_OLD, RHO, line_search
from lightning_lars.optim.norms import global_norms, math_dtype

UPDATE_RULES = ("FR", "PR")  # Fletcher-Reeves, Polak-Ribiere (core lines 224-228)
PRECONDITIONERS = ("bfgs", "none")
LINE_SEARCHES = ("step", "none")
EPS = 1e-8  # core lines 49 and 59: the H diagonal's eps and the eps of every division
LARS_DECAY = 0.1  # altopt_core.py line 29: the trust ratio's denominator adds 0.1 * eta * ||w||
STATE = ("h_diag", "prev_grad", "precond_grad", "direction")


class NLCG(LayerwiseOptimizer):
    """Preconditioned nonlinear conjugate gradients with the authors' "Step" line search.

    All tensors of all groups form ONE vector (the authors concatenate every variable); inner products are
    global. At step k (0-based) with raw gradients ``g`` and the closure's loss L (``p.grad`` is never modified)::

        g  = g + wd * w                                   # 1. L2 decay (the authors' L2 loss term)
        g  = eta * ||w|| / (||g|| + 1e-8 + 0.1 * eta * ||w||) * g   # 2. optional LARS, adapted tensors only
        H  = 1 at k = 0; else s = lr * b * d, y = g - g_prev        # 3. diagonal BFGS of the Hessian
             if <y, s> >= 1e-8 and <s, H s> >= 1e-8:
                 H = |H - (H^2 s^2 + 1e-8) / (<s, H s> + 1e-8) + (y^2 + 1e-8) / (<y, s> + 1e-8)|
             P = 1 / (H + 1e-8) (P = 1 at k = 0 or with precondition="none"); g_prev = g
        z  = -P * g;  rho = <-g, z>                                 # 4. preconditioned residual
        beta = clip(rho / (rho_prev + 1e-8), 0, 1)                    (FR)
             = clip((rho - <-g, z_prev>) / (rho_prev + 1e-8), 0, 1)   (PR)
        d  = z + beta * d  (d = z at k = 0)                           # 5. conjugate direction (stored)
        ema = L at k = 0, else 0.7 * ema + 0.3 * L                    # 6. line search every `period` steps
        if k > 0 and k % period == 0: q = ema / ema_old; ema_old = ema  (ema_old = L at k = 0)
             q < 1 + 0.01 tau:  b = min(1.05 b, 1)
             else: (f, c) = band of q (BANDS); b' = max(f b, 1e-4)
                   step direction = (1 - c) d - c * (b / b') * d_prev      # takes back part of the last step
        w += lr * b * (step direction, else d)                        # 7. b starts at 1

    At small steps the authors' ``+ 1e-8`` in the two numerators of step 3 takes over: each update takes about
    1e-8 / (<s, H s> + 1e-8) off every entry of H whose own terms are small, and once the LR has fallen far
    enough that <s, H s> is ~1e-6, entries reach 0 and P = 1 / (H + 1e-8) ~1e8 within a few dozen steps.
    Measured on 5,000 photographs (resnet10t, 4.9 M parameters, batch 125, LR at 1/1000 of its peak):
    <s, H s> 3e-7..2e-6, H's smallest entry 0.93 -> 2e-7 in 49 steps, the weights' largest entry 1.5 -> 95 in
    the next 20; BN kept the training loss flat while the evaluation, on running statistics, fell to 22 %
    top-1 (the same seed without the two 1e-8: 59.8 %). Kept as written: the recipe tests the authors' method.

    The loss EMAs are kept per rank; they are linear in L, so the check averages them over ``loss_group``
    (one 2-element all_reduce every `period` steps) and every rank makes the same decision.

    The line search reads the loss from ``closure``: Lightning's automatic optimization calls
    ``optimizer.step(closure=...)``, the closure runs forward and backward and returns the training loss, so
    there is no extra forward pass. With gradient accumulation it is the last micro-batch's loss. A step
    without a closure (e.g. ``precision=16-mixed``, whose GradScaler steps without one) skips the line search,
    with a warning; the EMAs start at the first step that has a loss, checks need one earlier loss.

    Args:
        params: parameters or param groups; groups without ``trust_adaptation`` are split by
            ``param_groups.excluded`` (BN and biases get no decay and no LARS scaling).
        lr: learning rate (default 0.1); the schedule callback overwrites ``group["lr"]`` before each step.
        weight_decay: L2 decay added to the gradient of adapted tensors (default 0.0).
        update_rule: "FR" (Fletcher-Reeves, the authors' default) or "PR" (Polak-Ribiere).
        precondition: "bfgs" (diagonal BFGS, default) or "none" (plain nonlinear CG).
        line_search: "step" (default: compare loss EMAs every `line_search_period` steps) or "none".
        line_search_period: steps between line-search checks (default 5).
        line_search_threshold: tau, scales the loss-increase bands (default 1.0).
        trust_coefficient: eta of the optional LARS gradient scaling (default 0.0: off; the authors' flag
            ``lars_lr`` is off by default, "good default value is 0.001").
        loss_group: the data-parallel group the loss is averaged over (default: the world, if initialized).
        shard_group: as for ``LARS`` (FSDP1 flat shards only); every rank must hold a shard of some tensor.
    ``couples_all_tensors``: the conjugate-gradient inner products span every tensor, so weight-update sharding
    (`parallel.sharded_update`, which steps each rank's own tensors) refuses NLCG.
    """

    couples_all_tensors = True
    numerator_eps = EPS  # the 1e-8 added to each element's numerators in step 3 (a probe's control sets 0)

    def __init__(
        self,
        params,
        lr: float = 0.1,
        weight_decay: float = 0.0,
        update_rule: str = "FR",
        precondition: str = "bfgs",
        line_search: str = "step",
        line_search_period: int = 5,
        line_search_threshold: float = 1.0,
        trust_coefficient: float = 0.0,
        loss_group: dist.ProcessGroup | None = None,
        shard_group: dist.ProcessGroup | None = None,
    ):
        for key, value, choices in (
            ("update_rule", update_rule, UPDATE_RULES),
            ("precondition", precondition, PRECONDITIONERS),
            ("line_search", line_search, LINE_SEARCHES),
        ):
            if value not in choices:
                raise ValueError(
                    f"NLCG {key}={value!r} is unknown; set optimizer.{key} to one of {', '.join(choices)}"
                )
        for key, value in (
            ("lr", lr),
            ("weight_decay", weight_decay),
            ("trust_coefficient", trust_coefficient),
        ):
            if value is None or value < 0:
                raise ValueError(f"NLCG {key}={value} is negative; set optimizer.{key} >= 0")
        period_message = f"NLCG line_search_period={line_search_period!r} must be an integer >= 1 (steps)"
        if isinstance(line_search_period, bool) or not isinstance(line_search_period, int):
            raise TypeError(period_message)
        if line_search_period < 1:
            raise ValueError(period_message)
        if not line_search_threshold > 0:
            raise ValueError(
                f"NLCG line_search_threshold={line_search_threshold} must be > 0 (1.0 is the authors')"
            )
        # step: updates done; num_losses: steps that had a loss for the line search (host ints, no device sync)
        defaults = {
            "lr": lr,
            "weight_decay": weight_decay,
            "trust_adaptation": None,
            "step": 0,
            "num_losses": 0,
        }
        self.update_rule, self.precondition, self.line_search = update_rule, precondition, line_search
        self.line_search_period, self.line_search_threshold = line_search_period, line_search_threshold
        self.trust_coefficient = trust_coefficient
        self.loss_group, self.shard_group = loss_group, shard_group
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """One NLCG step over all groups; returns the closure's loss."""
        loss = self.closure_loss(closure)
        work = multi_tensor.collect_groups(self, lambda group: STATE)
        if not work:
            return loss
        k = work[0][0]["step"]
        params = [p for _, t in work for p in t.params]
        weights = [w for _, t in work for w in t.weights]
        dtype = math_dtype(weights)
        scalars = self._scalars(params, dtype, weights[0].device)
        rho_prev, base_lr = scalars[RHO], scalars[BASE_LR]
        grads = self._gradients(work, params)
        state = {key: [x for _, t in work for x in t.state[key]] for key in STATE}
        precond = self._preconditioner(work, params, grads, state, base_lr, k)
        torch._foreach_copy_(state["prev_grad"], grads)
        # 4. z = -P g (a new list); rho = <-g, z>
        z = torch._foreach_mul(grads, precond) if precond is not None else torch._foreach_neg(grads)
        if precond is not None:
            torch._foreach_neg_(z)
        pairs = [(grads, z)] + ([(grads, state["precond_grad"])] if self.update_rule == "PR" and k else [])
        dots = -global_dots(pairs, params, self.shard_group)
        rho = dots[0]
        searching = self.line_search == "step" and loss is not None
        # not at step 0: torch.distributed.checkpoint creates optimizer state with one step(closure=None) at lr 0
        if self.line_search == "step" and loss is None and k > 0 and not self.__dict__.get("_warned_no_loss"):
            self._warned_no_loss = True
            warnings.warn(
                "NLCG line_search=step got no loss (step() without a closure, e.g. precision=16-mixed):"
                " the line search skips such steps; pass a closure or set optimizer.line_search=none",
                stacklevel=2,
            )
        seen = work[0][0]["num_losses"]
        check = searching and seen > 0 and k % self.line_search_period == 0
        previous = torch._foreach_mul(state["direction"], 1.0) if check else None  # a copy in one op
        if k == 0:
            torch._foreach_copy_(state["direction"], z)
        else:  # 5. d = z + beta d
            numerator = rho - dots[1] if self.update_rule == "PR" else rho
            beta = (numerator / (rho_prev + EPS)).clamp(0.0, 1.0)
            torch._foreach_mul_(state["direction"], beta)
            torch._foreach_add_(state["direction"], z)
        torch._foreach_copy_(state["precond_grad"], z)
        new = torch.stack([rho, base_lr, scalars[LOSS_EMA], scalars[LOSS_EMA_OLD]])
        take_back = None
        if searching:
            loss_value = loss.detach() if isinstance(loss, Tensor) else loss
            loss_value = torch.as_tensor(loss_value, dtype=dtype, device=new.device)
            take_back = line_search(
                new, loss_value, seen == 0, check, self.line_search_threshold, self.loss_group
            )
        self._apply(work, state["direction"], previous, take_back, new[BASE_LR])
        torch._foreach_copy_([self.state[p]["scalars"] for p in params], [new] * len(params))
        for group in self.param_groups:
            group["step"], group["num_losses"] = k + 1, seen + searching
        return loss

    def _scalars(self, params: list[Tensor], dtype: torch.dtype, device: torch.device) -> Tensor:
        """The global scalars (rho, base lr, loss EMAs), kept in every parameter's state so that checkpoints
        of any strategy carry them; identical copies. Created with base_lr = 1 (core line 61)."""
        for p in params:
            if "scalars" not in self.state[p]:
                self.state[p]["scalars"] = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=dtype, device=device)
        return self.state[params[0]]["scalars"].clone()

    def _gradients(self, work, params: list[Tensor]) -> list[Tensor]:
        """Steps 1 and 2: L2 decay, then the optional LARS scaling of adapted tensors (new tensors)."""
        grads = []
        for group, tensors in work:
            wd = group["weight_decay"]
            grads += (
                torch._foreach_add(tensors.grads, tensors.weights, alpha=wd) if wd else list(tensors.grads)
            )
        positions, start = [], 0  # indices of the adapted tensors in the flat lists
        for group, tensors in work:
            if group["trust_adaptation"]:
                positions += range(start, start + len(tensors.params))
            start += len(tensors.params)
        if not self.trust_coefficient or not positions:
            return grads
        order = multi_tensor.sharded_order(self, lambda group: group["trust_adaptation"])
        weights = [w for _, t in work for w in t.weights]
        w_norm, g_norm = global_norms(
            [[weights[i] for i in positions], [grads[i] for i in positions]],
            [params[i] for i in positions],
            self.shard_group,
            order,
        )
        eta = self.trust_coefficient
        scale = eta * w_norm / (g_norm + EPS + LARS_DECAY * eta * w_norm)
        adapted = [grads[i] for i in positions]
        # the per-tensor scale spread over a scratch laid out like the gradients: CUDA's multi-tensor fast path
        spread = scratch_for(self.__dict__.setdefault("_flat", {}), "trust", adapted)
        scaled = torch._foreach_mul(adapted, spread.spread(scale) if spread else list(scale.unbind(0)))
        for i, g in zip(positions, scaled):
            grads[i] = g
        return grads

    def _preconditioner(self, work, params, grads, state, base_lr: Tensor, k: int) -> list[Tensor] | None:
        """Step 3: the diagonal BFGS update of H; returns P = 1 / (H + eps), or None for P = 1."""
        if self.precondition == "none":
            return None
        h = state["h_diag"]
        if k == 0:  # core lines 177-178: reset H to the identity, and P = 1 exactly
            torch._foreach_zero_(h)
            torch._foreach_add_(h, 1.0)
            return None
        y = torch._foreach_sub(grads, state["prev_grad"])
        s = []
        for group, tensors in work:  # s = lr * b * d, with this step's lr and base lr (core lines 144-145)
            s += torch._foreach_mul(tensors.state["direction"], base_lr * group["lr"])
        hs = torch._foreach_mul(h, s)
        ys, shs = global_dots([(y, s), (s, hs)], params, self.shard_group)
        self.curvature = (ys, shs)  # <y, s>, <s, H s> of this step, for probes: references, no op, no sync
        update = (ys >= EPS) & (shs >= EPS)  # core lines 151-154: else H stays
        ys, shs = torch.where(update, ys, 1.0), torch.where(update, shs, 1.0)  # finite when unused
        correction = torch._foreach_mul(hs, s)
        torch._foreach_mul_(correction, h)
        torch._foreach_add_(correction, self.numerator_eps)
        torch._foreach_mul_(correction, 1.0 / (shs + EPS))
        new_h = torch._foreach_mul(y, y)
        torch._foreach_add_(new_h, self.numerator_eps)
        torch._foreach_mul_(new_h, 1.0 / (ys + EPS))
        torch._foreach_sub_(new_h, correction)
        torch._foreach_add_(new_h, h)
        torch._foreach_abs_(new_h)
        torch._foreach_lerp_(h, new_h, update.to(ys.dtype))  # weight 1 gives new_h exactly, 0 keeps h
        precond = torch._foreach_add(h, EPS)
        torch._foreach_reciprocal_(precond)
        return precond

    def _apply(
        self,
        work,
        direction: list[Tensor],
        previous: list[Tensor] | None,
        take_back: Tensor | None,
        base_lr: Tensor,
    ) -> None:
        """Step 7: w += lr * b * d, with part of the previous direction taken back at a check step."""
        start = 0
        for group, tensors in work:
            n = len(tensors.params)
            d = direction[start : start + n]
            step = base_lr * group["lr"]
            if take_back is not None:  # core lines 303-318: unchanged where lr * b' <= eps
                active = step > EPS
                c_new = torch.where(active, 1.0 - take_back[0], 1.0)
                c_old = torch.where(active, take_back[1], 0.0)
                d = torch._foreach_mul(d, c_new)
                torch._foreach_sub_(d, torch._foreach_mul(previous[start : start + n], c_old))
            multi_tensor.add_scaled_(tensors.weights, step, d)  # 0-d: two fast-path kernels
            multi_tensor.write_back(tensors)
            start += n
