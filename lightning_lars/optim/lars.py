"""LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017, https://arxiv.org/abs/1708.03888)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from lightning_lars.optim import lars_group, loss_scale, multi_tensor
from lightning_lars.optim.compiled import Compiled, Scalars, lars_update
from lightning_lars.optim.layerwise import LayerwiseOptimizer
from lightning_lars.optim.norms import global_norms

FORMS = ("nvidia", "mlperf", "you2017", "fujitsu")


class LARS(LayerwiseOptimizer):
    """LARS with momentum, in the published form a recipe names.

    Order of operations for every tensor ``w`` with raw gradient ``g`` (``p.grad`` is never modified)::

        d     = g + wd * w                                     # 1. weight decay (L2 form)
        trust = eta * ||w|| / (||g|| + wd * ||w|| + eps)       # 2. trust ratio, whole-tensor norms
        trust = 1            if ||w|| == 0 or ||g|| == 0, or the tensor is not adapted
        trust = min(trust / lr, 1)                  if clip    # LARC: effective lr = min(lr, trust)
        form "nvidia":           b = mu * b + trust * d;       w -= lr * b       # 3. lr outside the buffer
        form "mlperf"/"you2017": b = mu * b + lr * trust * d;  w -= b            # 3. lr inside the buffer
        form "fujitsu": b = mu * b + trust * (c * wd * w + lr * g);  w -= b     # decay not scaled by lr
        nesterov: the step uses (increment + mu * b) instead of b.

    "nvidia" (NVIDIA PyTorch/MXNet MLPerf code, timm, apex) equals MXNet with momentum correction;
    "mlperf" (TF/TPU MLPerf reference) and "you2017" (Intel Caffe) keep the lr in the buffer. They agree
    while the lr is constant and differ during warmup and decay. "mlperf" and "you2017" differ only in the
    default exclusion. "fujitsu" is the FJSGD kernel of Fujitsu's MLPerf v0.6 code (``MultiSGDLarsTwoStageKernel``
    in ``src/operator/mxnet_op.h``): the decay term is ``wd * c * w`` with the group's ``wd_coefficient`` ``c``
    (1.0 unless `callbacks.weight_decay_schedule` sets it), not multiplied by the lr, while the trust ratio keeps
    the plain ``wd``; the trust ratio applies wherever it is > 0 (``||w|| > 0``), even where ``||g|| == 0``.

    Which tensors skip decay and trust ratio comes from each param group: ``trust_adaptation`` (bool) and
    ``weight_decay``, as ``param_groups.param_groups`` builds them. A group without ``trust_adaptation`` (e.g.
    plain ``model.parameters()``) is split by ``param_groups.excluded`` (``ndim <= 1``: BN and biases get
    no decay and no trust ratio; MLPerf), except for ``form="you2017"``, which adapts and decays every tensor.

    All tensors of a step go through a few ``torch._foreach_*`` ops (one group's: ``optim.lars_group``) on
    CUDA's multi-tensor fast path: the per-tensor trust ratios scale ``d`` as one flat scratch buffer
    (``optim.flat``), so neither dispatched ops nor kernel launches grow with the number of tensors. Under
    ``torch.amp.GradScaler`` (16-mixed) the step unscales and skips on inf/NaN gradients by itself, on the device
    (``optim.loss_scale``): no host read.
    Norms and state are fp32 for bf16/fp16 parameters, which get an fp32 master copy.
    FSDP2 DTensor parameters are detected; the trust ratio uses whole-parameter norms with one all_reduce.

    Args:
        params: parameters or param groups (see above).
        lr: learning rate (default 0.1); the schedule callback overwrites ``group["lr"]`` before each step.
        momentum: mu (default 0.9).
        weight_decay: wd for adapted tensors (default 1e-4, Goyal et al. 2017 and conf/optimizer/lars.yaml).
        trust_coefficient: eta (default 0.001).
        eps: added to the trust-ratio denominator (default 0.0; MLPerf rules fix 0).
        nesterov: Nesterov momentum (default False).
        form: "mlperf" (default, as conf/optimizer/lars.yaml), "nvidia", "you2017" or "fujitsu", see above.
        clip: LARC clipping (default False).
        shard_group: FSDP1 ``use_orig_params=True`` only: the process group the flat shards are spread over;
            norms of plain tensors are then summed over it. Not needed for DTensors or DDP.
        implementation: "eager" (default): foreach ops; "compiled": steps 1-3 as one ``torch.compile``d
            function per group (``optim.compiled``), falling back to eager, with a warning, where compiling
            fails. ``conf/optimizer/lars.yaml`` selects it with ``implementation``.

    Set ``track_stats = True`` and every following step stores ``last_stats``: a dict with ``names`` and fp32
    vectors ``w_norm``, ``g_norm``, ``trust_ratio`` (before LARC clipping) for the adapted tensors.
    """

    _step_supports_amp_scaling = True  # GradScaler hands over grad_scale/found_inf (optim.loss_scale)

    def __init__(
        self,
        params,
        lr: float = 0.1,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        trust_coefficient: float = 0.001,
        eps: float = 0.0,
        nesterov: bool = False,
        form: str = "mlperf",
        clip: bool = False,
        shard_group: dist.ProcessGroup | None = None,
        implementation: str = "eager",
    ):
        if form not in FORMS:
            raise ValueError(
                f"LARS form {form!r} is unknown; set optimizer.form to one of {', '.join(FORMS)}"
            )
        for name, value in (("lr", lr), ("weight_decay", weight_decay), ("eps", eps)):
            if value < 0:
                raise ValueError(f"LARS {name}={value} is negative; set optimizer.{name} >= 0")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"LARS momentum={momentum} is outside [0, 1); set optimizer.momentum")
        if trust_coefficient <= 0:
            raise ValueError(f"LARS trust_coefficient={trust_coefficient} must be > 0 (0.001 is usual)")
        if nesterov and momentum == 0:
            raise ValueError("LARS nesterov=true needs momentum > 0; set optimizer.momentum")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "trust_coefficient": trust_coefficient,
            "eps": eps,
            "nesterov": nesterov,
            "form": form,
            "clip": clip,
            "trust_adaptation": None,
            "wd_coefficient": 1.0,
        }
        self.shard_group = shard_group
        self.track_stats = False
        # a GroupedAllReduceState whose hook computed ||g|| (see lars_group.hooked_grad_norms)
        self.grad_norm_source = None
        self.last_stats: dict | None = None
        self._update_fn = Compiled(lars_update, implementation)
        self._scalars = Scalars()
        super().__init__(params, defaults)

    @property
    def implementation(self) -> str:
        """What steps run now: "compiled", or "eager" (also after a compile that failed)."""
        return self._update_fn.mode

    def adapts_all(self, param_group: dict) -> bool:
        """Form "you2017" (Intel Caffe) adapts and decays every tensor of a group that does not say."""
        return param_group.get("form", self.defaults["form"]) == "you2017"

    @torch.no_grad()
    def step(self, closure=None):
        """One LARS step for every group; returns the closure's loss if one is given."""
        loss = self.closure_loss(closure)
        work = multi_tensor.collect_groups(
            self, lambda group: ("momentum_buffer",) if group["momentum"] else ()
        )
        grad_scale, found_inf = loss_scale.scaler_inputs(self)
        skip = None
        if work and (grad_scale is not None or found_inf is not None):
            work, skip = loss_scale.unscale(self, work, grad_scale, found_inf)
        adapted = [(g, t) for g, t in work if g["trust_adaptation"]]
        # Norms of every adapted tensor in this step together: one foreach op per list, one collective.
        params = [p for _, t in adapted for p in t.params]
        weights, grads = [w for _, t in adapted for w in t.weights], [x for _, t in adapted for x in t.grads]
        # the hook's norms are of the scaled gradients: the strategy refuses them under a scaler
        hooked = lars_group.hooked_grad_norms(self.grad_norm_source, params) if skip is None else None
        order = multi_tensor.sharded_order(self, lambda group: group["trust_adaptation"])
        if hooked is None:
            w_norm, g_norm = global_norms([weights, grads], params, self.shard_group, order)
        else:  # the DDP comm hook already took ||g|| of the averaged gradients while they passed through
            (w_norm,), g_norm = global_norms([weights], params, self.shard_group, order), hooked
        counts = [len(t.params) for _, t in adapted]
        one = len(counts) == 1  # the usual case: skip the split
        w_parts, g_parts = ([w_norm], [g_norm]) if one else (w_norm.split(counts), g_norm.split(counts))
        if self._update_fn.mode == "eager":
            ratios = [
                lars_group.trust_ratio(w, g, group) for (group, _), w, g in zip(adapted, w_parts, g_parts)
            ]
            by_group = {id(t): r for (_, t), r in zip(adapted, ratios)}
            scratch = self.__dict__.setdefault("_flat", {})
            for index, (group, tensors) in enumerate(work):
                keep = None if skip is None else loss_scale.keep_factor(skip, tensors.weights[0])
                lars_group.eager_update(group, tensors, by_group.get(id(tensors)), keep, scratch, index)
        else:
            norms = {id(t): (w, g) for (_, t), w, g in zip(adapted, w_parts, g_parts)}
            ratios = []
            for index, (group, tensors) in enumerate(work):
                keep = None if skip is None else loss_scale.keep_factor(skip, tensors.weights[0])
                w, g = norms.get(id(tensors), (None, None))
                hyper = self._scalars(index, lars_group.hyper_values(group), tensors.weights[0])
                ratio = lars_group.compiled_update(self._update_fn, hyper, group, tensors, w, g, keep)
                ratios += [ratio] if ratio is not None else []
        if self.track_stats and adapted:
            names = [n for _, t in adapted for n in t.names]
            self.last_stats = multi_tensor.stats(
                names, w_norm, g_norm, ratios[0] if one else torch.cat(ratios)
            )
        return loss
