"""The elementwise part of the LARS and LAMB steps as functions that ``torch.compile`` fuses into a few kernels.

Eager, a LARS step is some 20 ``torch._foreach_*`` ops and a LAMB step some 39: each reads and writes every
tensor again (on the CPU each is even a per-tensor loop). Compiled, Inductor fuses a chain of foreach ops
into one pass over each tensor (on a GPU, one multi-tensor kernel per chain).

Every value a schedule may change between steps (lr, momentum, weight decay and its coefficient) enters as a
0-d tensor in ``hyper``, never as a Python float, so a new value each step reuses the compiled code; only
the structure (form, Nesterov, LARC, whether decay or momentum is zero, the tensors' shapes) is specialised.

`Compiled` wraps one of these functions: it compiles on first use and falls back to running it eagerly, with
one warning, where compilation is unavailable (no C++ compiler, an unsupported Python) or fails. The
functions are plain foreach code, so eager and compiled compute the same thing.
"""

from __future__ import annotations

import types
import warnings

import torch
from torch import Tensor

MODES = ("eager", "compiled")
# Inductor parallelises CPU loops from 512 elements; on a busy machine each tiny OpenMP region then waits for
# descheduled threads (the BN/bias group of ResNet-50: 200 ms vs 0.1 ms single-threaded). 32768 is the
# grain size of ATen's own CPU loops. Horizontal fusion (default: up to 16 same-size tensors in one loop) makes
# LAMB's direction loop stream 7 arrays per tensor at once, 28 for 4 tensors: 1.36x fused AdamW's time on one
# core, 1.11x with one tensor per loop (LARS's update: the same either way). GPU code ignores both.
OPTIONS = {"cpp.min_chunk_size": 32768, "cpp.max_horizontal_fusion_size": 1}


def lars_update(
    weights: list[Tensor],
    grads: list[Tensor],
    bufs: list[Tensor],
    w_norm: Tensor | None,
    g_norm: Tensor | None,
    hyper: list[Tensor],
    form: str,
    nesterov: bool,
    clip: bool,
    has_wd: bool,
    has_mu: bool,
    has_eps: bool,
    keep: Tensor | None = None,
) -> Tensor | None:
    """One LARS group update in place (the order of operations is `LARS`'s); returns the trust ratios
    before LARC clipping, or None for a group that is not adapted (``w_norm`` None).

    ``hyper`` holds ``lr, momentum, weight_decay, trust_coefficient, eps, wd_coefficient`` as 0-d tensors.
    ``keep`` (AMP, ``optim.loss_scale``): 0-d, 0 on a step that must change nothing (finite gradients
    assumed: the caller zeroed them), which then adds no increment, keeps the buffer and the weights.
    """
    lr, mu, wd, eta, eps, wd_coefficient = hyper
    if keep is not None:
        mu = keep * mu + (1.0 - keep)
    fujitsu, lr_inside = form == "fujitsu", form != "nvidia"
    if fujitsu:  # 1. d = lr * g + c * wd * w (decay not scaled by lr)
        d = torch._foreach_mul(grads, lr)
        if has_wd:
            torch._foreach_add_(d, torch._foreach_mul(weights, wd * wd_coefficient))
    else:  # 1. d = g + wd * w
        d = torch._foreach_add(grads, torch._foreach_mul(weights, wd)) if has_wd else grads
    ratio = None
    if w_norm is not None:  # 2. trust ratio, 1 where a norm is 0 (fujitsu: where ||w|| is 0)
        denominator = g_norm + wd * w_norm if has_wd else g_norm
        if has_eps:
            denominator = denominator + eps
        valid = w_norm if fujitsu else torch.minimum(w_norm, g_norm)
        ratio = torch.where(valid > 0, eta * w_norm / denominator, 1.0)
        scale = (ratio / lr).clamp(max=1.0) if clip else ratio
        if lr_inside and not fujitsu:
            scale = scale * lr
        increment = torch._foreach_mul(d, list(scale.unbind(0)))
    elif lr_inside and not fujitsu:
        increment = torch._foreach_mul(d, lr)
    else:
        increment = d
    out = -1.0 if lr_inside else -lr  # 3. from buffer to weight step
    if keep is not None:
        increment, out = torch._foreach_mul(increment, keep), out * keep
    if has_mu:
        torch._foreach_mul_(bufs, mu)
        torch._foreach_add_(bufs, increment)
        if nesterov:
            torch._foreach_add_(weights, torch._foreach_mul(increment, out))
            torch._foreach_add_(weights, torch._foreach_mul(bufs, out * mu))
        else:
            torch._foreach_add_(weights, torch._foreach_mul(bufs, out))
    else:
        torch._foreach_add_(weights, torch._foreach_mul(increment, out))
    return ratio


def lamb_direction(
    weights: list[Tensor],
    grads: list[Tensor],
    exp_avg: list[Tensor],
    exp_avg_sq: list[Tensor],
    updates: list[Tensor],
    clip: Tensor | None,
    hyper: list[Tensor],
    has_wd: bool,
    adapted: bool,
) -> None:
    """LAMB steps 2-3 for one group in one pass: update the moments in place and write u into ``updates``; a
    group that is not adapted (r = 1) takes step 5 in the same pass, ``w -= lr * u``, and ``updates`` is unused.

    ``updates`` are persistent scratch tensors: a new u each step (4 B/param) was fresh memory, which the
    kernel zeroes page by page on first touch (24,000 page faults per ResNet-50 step on the CPU: most of the
    compiled step's time).

    ``hyper`` holds ``b1, b2, eps, weight_decay, 1 / bias_correction1, 1 / sqrt(bias_correction2), lr, 1 - b1,
    1 - b2`` (0-d; ``1 - b`` taken in fp64 before rounding, as eager's Python floats: ``1 - fp32(0.999)`` is
    4.7e-5 off).
    """
    b1, b2, eps, wd, inv_bc1, inv_sqrt_bc2, lr, one_minus_b1, one_minus_b2 = hyper
    g = torch._foreach_mul(grads, clip) if clip is not None else grads
    # m = b1 m + (1 - b1) g as mul + add: lerp's decomposition adds a compare and a blend per element
    torch._foreach_mul_(exp_avg, b1)
    torch._foreach_add_(exp_avg, torch._foreach_mul(g, one_minus_b1))
    torch._foreach_mul_(exp_avg_sq, b2)
    torch._foreach_add_(exp_avg_sq, torch._foreach_mul(torch._foreach_mul(g, g), one_minus_b2))
    denom = torch._foreach_add(torch._foreach_mul(torch._foreach_sqrt(exp_avg_sq), inv_sqrt_bc2), eps)
    update = torch._foreach_div(torch._foreach_mul(exp_avg, inv_bc1), denom)
    if has_wd:
        update = torch._foreach_add(update, torch._foreach_mul(weights, wd))
    if adapted:
        torch._foreach_copy_(updates, update)
    else:
        torch._foreach_add_(weights, torch._foreach_mul(update, -lr))


def lamb_apply(weights: list[Tensor], updates: list[Tensor], ratio: Tensor, hyper: list[Tensor]) -> None:
    """LAMB step 5 for an adapted group: ``w -= lr * r * u`` in place (``r`` per tensor)."""
    torch._foreach_add_(weights, torch._foreach_mul(updates, list((ratio * -hyper[6]).unbind(0))))


class Scalars:
    """A group's scheduled values as 0-d tensors on the parameters' device, one set per group index.

    A tensor is refilled only when its value changed since the last step: on a GPU ``fill_`` is one small
    kernel and no host sync (building a new tensor from Python floats would copy host to device and wait).
    """

    def __init__(self):
        self._tensors: dict[int, list[Tensor]] = {}
        self._values: dict[int, list[float]] = {}

    def __call__(self, index: int, values: list[float], like: Tensor) -> list[Tensor]:
        tensors = self._tensors.get(index)
        if tensors is None or tensors[0].dtype != like.dtype or tensors[0].device != like.device:
            tensors = [torch.tensor(v, dtype=like.dtype, device=like.device) for v in values]
            self._tensors[index], self._values[index] = tensors, list(values)
            return tensors
        old = self._values[index]
        for i, (t, v) in enumerate(zip(tensors, values)):
            if old[i] != v:
                t.fill_(v)
                old[i] = v
        return tensors


class Compiled:
    """``fn`` compiled on first call (``mode="compiled"``) or run as is (``mode="eager"``).

    A compile that raises (Inductor without a C++ compiler, an unsupported Python) warns once and leaves this
    wrapper eager from then on: the step still runs, only slower. Inside a region that is itself being
    compiled the function runs as is, and the outer compile traces it.
    """

    def __init__(self, fn, mode: str):
        if mode not in MODES:
            raise ValueError(
                f"implementation={mode!r} is unknown; set optimizer.implementation to eager or compiled"
            )
        self.fn, self.mode = fn, mode
        self._compiled = None
        if mode == "compiled" and not torch._dynamo.is_dynamo_supported():
            warnings.warn(
                "torch.compile is unsupported here; the optimizer step runs eagerly"
                " (set optimizer.implementation=eager)",
                stacklevel=3,
            )
            self.mode = "eager"
        elif mode == "compiled":
            # Dynamo keeps compiled code, and its limit of 8 specialisations, per code object: a copy of fn's
            # code per optimizer keeps optimizers of other models (a test session) from using up its slots.
            # dynamic=False: each param group's list of shapes is one specialisation.
            fn = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__)
            self._compiled = torch.compile(fn, dynamic=False, fullgraph=True, options=OPTIONS)

    def __call__(self, *args, **kwargs):
        if self.mode == "eager" or torch.compiler.is_compiling():
            return self.fn(*args, **kwargs)
        try:
            return self._compiled(*args, **kwargs)
        except Exception as error:  # compile failed: this backend cannot build kernels here
            failures = (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit)
            if not isinstance(error, failures):
                raise  # not a compile failure: a real error, and the step may have written already
            cause = getattr(error, "inner_exception", None) or error  # what the backend itself raised
            first = (str(cause).splitlines() or [""])[0][:200]
            warnings.warn(
                f"compiling the optimizer step failed ({type(cause).__name__}: {first}); it runs eagerly"
                " from now on (set optimizer.implementation=eager to skip the attempt)",
                stacklevel=2,
            )
            self.mode = "eager"
            return self.fn(*args, **kwargs)
