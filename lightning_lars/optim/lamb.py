"""LAMB: layer-wise adaptive moments (You et al. 2019, https://arxiv.org/abs/1904.00962), as in the LAMB
ResNet-50 run: decoupled weight decay, BN and biases excluded from decay and trust ratio, global gradient-norm
clipping."""

from __future__ import annotations

import math
from itertools import accumulate

import torch
import torch.distributed as dist
from torch import Tensor

from lightning_lars.optim import loss_scale, multi_tensor
from lightning_lars.optim.compiled import Compiled, Scalars, lamb_apply, lamb_direction
from lightning_lars.optim.flat import scratch_for
from lightning_lars.optim.layerwise import LayerwiseOptimizer
from lightning_lars.optim.norms import global_norms


class LAMB(LayerwiseOptimizer):
    """LAMB with decoupled weight decay and global gradient clipping.

    Order of operations at step t (1-based) for every tensor ``w`` with raw gradient ``g`` (``p.grad`` is
    never modified)::

        c     = min(1, max_grad_norm / ||G||)      # 1. G: all gradients of all groups as one vector
        m     = b1 * m + (1 - b1) * c * g          # 2. Adam moments of the clipped gradient
        v     = b2 * v + (1 - b2) * (c * g)^2
        u     = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * w     # 3. decoupled weight decay
        r     = ||w|| / ||u||; r = 1 if either norm is 0 or the tensor is not adapted    # 4. trust ratio
        w    -= lr * r * u                          # 5.

    Exclusions come from the param groups exactly as for ``LARS`` (``trust_adaptation``, ``weight_decay``; a
    group without ``trust_adaptation`` is split by ``param_groups.excluded``). Two collectives per step under
    sharding: one for ``||G||`` and every ``||w||``, one for every ``||u||`` (u depends on the clipped g).

    Args:
        params: parameters or param groups.
        lr: learning rate (default 1e-3); the schedule callback overwrites ``group["lr"]`` before each step.
        betas: (b1, b2) (default (0.9, 0.999)).
        eps: added to sqrt(v_hat) (default 1e-6).
        weight_decay: wd, decoupled (added to the update, not the gradient) (default 0.01, the LAMB paper's
            and conf/optimizer/lamb.yaml).
        max_grad_norm: global gradient-norm clip (default 1.0); None or 0 disables it. It clips the gradient
            this optimizer sees, i.e. after DDP's all-reduce: the mean over the global batch. The authors'
            ResNet-50 code (fastalgo/imagenet_resnet50_lamb optimization.py line 49) clips each TPU core's local
            gradient before ``CrossShardOptimizer`` sums them, which no per-step optimizer can reproduce.
        bias_correction: divide the moments by (1 - b^t) (default True, the paper's Algorithm 2). The authors'
            ResNet-50 code has none (optimization.py lines 111-117): set False to match it.
        shard_group: as for ``LARS`` (FSDP1 flat shards only).
        implementation: "eager" (default) or "compiled", as for ``LARS``; compiled, steps 2-3 run as one
            compiled pass per group and step 5 as another (a group that is not adapted takes step 5 in the
            first pass); u is kept in persistent scratch tensors, 4 bytes per adapted parameter.

    ``track_stats``/``last_stats`` work as for ``LARS``; ``trust_ratio`` is r and ``g_norm`` the raw ||g||.

    Step 5's per-tensor r is spread over a scratch laid out like the weights (``optim.flat``), so it runs on
    CUDA's multi-tensor fast path. Under ``torch.amp.GradScaler`` (16-mixed) the step unscales
    and skips on inf/NaN gradients on the device (``optim.loss_scale``): it then runs steps 2-3 with its
    scalars as 0-d tensors (``compiled.lamb_direction``, compiled or not) and counts t on the device, where
    ``group["step"]`` becomes a 0-d fp32 tensor, as torch's capturable Adam keeps its step; a skipped step
    does not count, as in torch's fused AdamW.
    """

    _step_supports_amp_scaling = True  # GradScaler hands over grad_scale/found_inf (optim.loss_scale)

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float | None = 1.0,
        bias_correction: bool = True,
        shard_group: dist.ProcessGroup | None = None,
        implementation: str = "eager",
    ):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if value < 0:
                raise ValueError(f"LAMB {name}={value} must be >= 0; set optimizer.{name}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"LAMB betas={tuple(betas)} must lie in [0, 1); set optimizer.betas")
        if max_grad_norm is not None and max_grad_norm < 0:
            raise ValueError(f"LAMB max_grad_norm={max_grad_norm} is negative; use null to disable clipping")
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "bias_correction": bias_correction,
            "trust_adaptation": None,
            "step": 0,
        }
        self.max_grad_norm = max_grad_norm
        self.shard_group = shard_group
        self.track_stats = False
        self.last_stats: dict | None = None
        self._direction_fn = Compiled(lamb_direction, implementation)
        self._apply_fn = Compiled(lamb_apply, implementation)
        self._scalars = Scalars()
        self._updates: dict[Tensor, Tensor] = {}  # param -> u, compiled only (see _tensor_direction)
        self._hypers: dict[int, list[Tensor]] = {}  # group index -> this step's 0-d scalars (tensor paths)
        super().__init__(params, defaults)

    @property
    def implementation(self) -> str:
        """What steps run now: "compiled", or "eager" (also after a compile that failed)."""
        both = {self._direction_fn.mode, self._apply_fn.mode}
        return "compiled" if both == {"compiled"} else "eager"

    @torch.no_grad()
    def step(self, closure=None):
        """One LAMB step for every group; returns the closure's loss if one is given."""
        loss = self.closure_loss(closure)
        self._hypers = {}
        work = multi_tensor.collect_groups(self, lambda group: ("exp_avg", "exp_avg_sq"))
        grad_scale, found_inf = loss_scale.scaler_inputs(self)
        keeps = [None] * len(work)
        if work and (grad_scale is not None or found_inf is not None):
            work, skip = loss_scale.unscale(self, work, grad_scale, found_inf)
            keeps = [loss_scale.keep_factor(skip, t.weights[0]) for _, t in work]
        # FSDP1: a rank holding no shard of some tensors (grad None) still joins both collectives in full.
        every, every_adapted = (
            multi_tensor.sharded_order(self, lambda g: True),
            multi_tensor.sharded_order(self, lambda g: g["trust_adaptation"]),
        )
        if not work and not every:
            return loss
        params = [p for _, t in work for p in t.params]
        # Collective 1: every ||w|| and ||g||, and ||G|| (the norm of all g norms, also those this rank lacks).
        w_norm, g_norm, totals = global_norms(
            [[w for _, t in work for w in t.weights], [g for _, t in work for g in t.grads]],
            params,
            self.shard_group,
            every,
            totals=True,
        )
        clip = None
        if self.max_grad_norm:
            clip = (self.max_grad_norm / totals[1]).clamp(max=1.0)  # inf -> 1 if G = 0
        if self._direction_fn.mode == "compiled" or keeps[0] is not None:
            # u of adapted groups in scratch tensors; other groups are updated (step 5) here, None
            updates = [self._tensor_direction(i, g, t, clip, keeps[i]) for i, (g, t) in enumerate(work)]
        else:
            updates = [self._direction(group, tensors, clip) for group, tensors in work]
        adapted = [i for i, (group, _) in enumerate(work) if group["trust_adaptation"]]
        if adapted or every_adapted:  # Collective 2: ||u|| of every adapted tensor.
            (u_norm,) = global_norms(
                [[x for i in adapted for x in updates[i]]],
                [p for i in adapted for p in work[i][1].params],
                self.shard_group,
                every_adapted,
            )
        if not adapted:
            for i, ((group, tensors), u) in enumerate(zip(work, updates)):
                self._apply(i, group, tensors, u, None)
            return loss
        counts = [len(work[i][1].params) for i in adapted]
        # group i's entries in w_norm and g_norm: starts[i] to starts[i + 1]
        starts = list(accumulate([len(t.params) for _, t in work], initial=0))
        adapted_w = torch.cat([w_norm[starts[i] : starts[i + 1]] for i in adapted])
        ratio = torch.where(torch.minimum(adapted_w, u_norm) > 0, adapted_w / u_norm, 1.0)
        by_index = dict(zip(adapted, ratio.split(counts)))
        for i, ((group, tensors), u) in enumerate(zip(work, updates)):
            self._apply(i, group, tensors, u, by_index.get(i))
        if self.track_stats:
            adapted_g = torch.cat([g_norm[starts[i] : starts[i + 1]] for i in adapted])
            names = [n for i in adapted for n in work[i][1].names]
            self.last_stats = multi_tensor.stats(names, adapted_w, adapted_g, ratio)
        return loss

    def _hyper(self, index: int, group: dict, tensors: multi_tensor.GroupTensors, keep) -> list[Tensor]:
        """The group's scalars as 0-d tensors (see ``compiled.lamb_direction``); counts the step.

        With ``keep`` (AMP) t is counted on the device and a skipped step turns the factors into identities
        (b1, b2 -> 1, lr -> 0)."""
        b1, b2 = group["betas"]
        like = tensors.weights[0]
        if keep is None:
            group["step"] = _host_step(group["step"]) + 1
            t = group["step"]
            bc1, bc2 = (1.0 - b1**t, 1.0 - b2**t) if group["bias_correction"] else (1.0, 1.0)
            values = [
                b1,
                b2,
                group["eps"],
                group["weight_decay"],
                1.0 / bc1,
                1.0 / math.sqrt(bc2),
                group["lr"],
                1.0 - b1,
                1.0 - b2,
            ]
            self._hypers[index] = self._scalars(index, values, like)
            return self._hypers[index]
        step = group["step"]
        if not isinstance(step, Tensor) or step.device != like.device:  # once: the first step under a scaler
            step = torch.as_tensor(step, dtype=torch.float32).to(like.device)
        group["step"] = step = step + keep.float()
        # a skipped first step has t = 0, where 1 / (1 - b^t) would be inf and u NaN; its lr is 0 anyway
        t = step.clamp(min=1.0).to(like.dtype)
        # eps as a float: foreach's add of a 0-d tensor reads it to the host on a CPU
        eps, (wd,) = group["eps"], self._scalars(("amp", index), [group["weight_decay"]], like)
        ones = torch.ones_like(t)
        if group["bias_correction"]:
            inv_bc1, inv_sqrt_bc2 = 1.0 / (1.0 - b1**t), torch.rsqrt(1.0 - b2**t)
        else:
            inv_bc1, inv_sqrt_bc2 = ones, ones
        b1_kept, b2_kept = loss_scale.kept(b1, keep), loss_scale.kept(b2, keep)
        lr, rest = keep * group["lr"], [keep * (1.0 - b1), keep * (1.0 - b2)]
        self._hypers[index] = [b1_kept, b2_kept, eps, wd, inv_bc1, inv_sqrt_bc2, lr, *rest]
        return self._hypers[index]

    def _tensor_direction(self, index, group, tensors, clip, keep) -> list[Tensor] | None:
        """Steps 2-3 with 0-d tensor scalars (compiled, or under AMP): u in scratch tensors (adapted group), or
        step 5 done too (None)."""
        hyper = self._hyper(index, group, tensors, keep)
        clip = clip.to(hyper[0].dtype) if clip is not None else None
        adapted = bool(group["trust_adaptation"])
        updates = [self._scratch(p, w) for p, w in zip(tensors.params, tensors.weights)] if adapted else []
        self._direction_fn(
            tensors.weights,
            tensors.grads,
            tensors.state["exp_avg"],
            tensors.state["exp_avg_sq"],
            updates,
            clip,
            hyper,
            bool(group["weight_decay"]),
            adapted,
        )
        return updates if adapted else None

    def _scratch(self, param: Tensor, like: Tensor) -> Tensor:
        """u's persistent tensor for ``param`` (not state: never saved; rebuilt if the shard changes)."""
        u = self._updates.get(param)
        if u is None or u.shape != like.shape or u.dtype != like.dtype or u.device != like.device:
            u = self._updates[param] = torch.empty_like(like)
        return u

    @staticmethod
    def _direction(group: dict, tensors: multi_tensor.GroupTensors, clip: Tensor | None) -> list[Tensor]:
        """Update the moments and return u (step 2 and 3), new tensors."""
        b1, b2 = group["betas"]
        group["step"] = _host_step(group["step"]) + 1
        t = group["step"]
        grads = torch._foreach_mul(tensors.grads, clip) if clip is not None else tensors.grads
        exp_avg, exp_avg_sq = tensors.state["exp_avg"], tensors.state["exp_avg_sq"]
        torch._foreach_lerp_(exp_avg, grads, 1.0 - b1)  # m += (1 - b1) (g - m)
        torch._foreach_mul_(exp_avg_sq, b2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1.0 - b2)
        bc1, bc2 = (1.0 - b1**t, 1.0 - b2**t) if group["bias_correction"] else (1.0, 1.0)
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_mul_(denom, 1.0 / math.sqrt(bc2))
        torch._foreach_add_(denom, group["eps"])
        if group["weight_decay"]:
            update = torch._foreach_mul(tensors.weights, group["weight_decay"])
            torch._foreach_addcdiv_(update, exp_avg, denom, value=1.0 / bc1)
        else:
            update = torch._foreach_div(exp_avg, denom)
            torch._foreach_mul_(update, 1.0 / bc1)
        return update

    def _apply(
        self,
        index,
        group,
        tensors: multi_tensor.GroupTensors,
        update: list[Tensor] | None,
        ratio: Tensor | None,
    ):
        """w -= lr * r * u (step 5); ``update`` None: the direction already took this step."""
        if update is None:
            multi_tensor.write_back(tensors)
            return
        hyper = self._hypers.get(index)  # set this step by _hyper on the tensor-scalar paths only
        lr = group["lr"] if hyper is None else hyper[6]
        if self._apply_fn.mode == "compiled" and ratio is not None:
            self._apply_fn(tensors.weights, update, ratio.to(hyper[0].dtype), hyper)
            multi_tensor.write_back(tensors)
            return
        spread = None  # the per-tensor r through a scratch laid out like the weights: CUDA's fast path
        if ratio is not None:
            spread = scratch_for(self.__dict__.setdefault("_flat", {}), ("factor", index), tensors.weights)
        multi_tensor.add_scaled_(tensors.weights, ratio * -lr if ratio is not None else -lr, update, spread)
        multi_tensor.write_back(tensors)


def _host_step(step) -> int:
    """t as a Python int: a step counted on the device (a run under a scaler, resumed without) is read once."""
    return int(step.item()) if isinstance(step, Tensor) else step
