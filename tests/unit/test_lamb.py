"""LAMB against a float64 reference written from the formulas, over several steps with a changing lr."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import small_mlp, steps_with
from torch import nn

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.op_count import count_ops
from lightning_lars.optim.param_groups import param_groups

LRS = [0.01, 0.03, 0.05, 0.02]


def _grads(model: nn.Module, steps: int, scale: float = 1.0) -> list[list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        [scale * torch.randn(p.shape, generator=generator, dtype=torch.float64) for p in model.parameters()]
        for _ in range(steps)
    ]


def reference(weights, grads_per_step, lrs, *, adapted, decay, b1, b2, eps, max_grad_norm, bias_correction):
    """LAMB in float64, one tensor at a time: You et al. 2019 (Algorithm 2) + global gradient clipping."""
    weights = [w.clone().double() for w in weights]
    m = [torch.zeros_like(w) for w in weights]
    v = [torch.zeros_like(w) for w in weights]
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
        total = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        c = min(1.0, max_grad_norm / total.item()) if max_grad_norm else 1.0
        for i, (w, g) in enumerate(zip(weights, grads)):
            g = c * g
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat = m[i] / (1 - b1**t) if bias_correction else m[i]
            v_hat = v[i] / (1 - b2**t) if bias_correction else v[i]
            u = m_hat / (v_hat.sqrt() + eps) + decay[i] * w
            r = w.norm() / u.norm() if adapted[i] and w.norm() > 0 and u.norm() > 0 else 1.0
            weights[i] = w - lr * r * u
    return weights


@pytest.mark.parametrize("max_grad_norm", [None, 0.5, 100.0])  # off, clipping every step, never clipping
@pytest.mark.parametrize("bias_correction", [True, False])
def test_matches_float64_reference(max_grad_norm, bias_correction):
    _check_reference(max_grad_norm, bias_correction, "eager")


# Compiling costs seconds per case on a CPU: two cases that take every branch of the compiled functions.
@pytest.mark.parametrize("max_grad_norm, bias_correction", [(0.5, True), (None, False)])
def test_compiled_step_matches_float64_reference(max_grad_norm, bias_correction):
    _check_reference(max_grad_norm, bias_correction, "compiled")


def _check_reference(max_grad_norm, bias_correction, implementation):
    model = small_mlp()
    start = [p.detach().clone() for p in model.parameters()]
    grads = _grads(model, len(LRS))
    opt = LAMB(
        param_groups(model, 0.1),
        betas=(0.9, 0.99),
        eps=1e-6,
        max_grad_norm=max_grad_norm,
        bias_correction=bias_correction,
        implementation=implementation,
    )
    ours = steps_with(model, opt, grads, LRS)
    assert opt.implementation == implementation  # a compiled case that fell back would test eager twice
    adapted = [p.ndim > 1 for p in start]
    expected = reference(
        start,
        grads,
        LRS,
        adapted=adapted,
        decay=[0.1 if a else 0.0 for a in adapted],
        b1=0.9,
        b2=0.99,
        eps=1e-6,
        max_grad_norm=max_grad_norm,
        bias_correction=bias_correction,
    )
    for got, want, before in zip(ours, expected, start):
        assert (want - before).abs().max() > 1e-4
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_clipping_changes_the_result_only_when_the_norm_exceeds_the_limit():
    def final(max_grad_norm):
        model = small_mlp()
        return steps_with(
            model,
            LAMB(model.parameters(), max_grad_norm=max_grad_norm, eps=1e-3),
            _grads(model, len(LRS)),
            LRS,
        )

    off = final(None)
    assert all(torch.equal(a, b) for a, b in zip(off, final(1e6)))
    assert max((a - b).abs().max() for a, b in zip(off, final(0.1))) > 1e-4


def test_bn_and_bias_get_no_decay_and_no_trust_ratio_by_default():
    model = small_mlp()
    opt = LAMB(model.parameters(), weight_decay=1.5)
    assert [
        (g["trust_adaptation"], g["weight_decay"], [p.ndim for p in g["params"]]) for g in opt.param_groups
    ] == [(True, 1.5, [2, 2]), (False, 0.0, [1, 1, 1, 1])]


def test_zero_weight_gives_ratio_one():
    w = nn.Parameter(torch.zeros(2, 3, dtype=torch.float64))
    opt = LAMB([{"params": [w], "trust_adaptation": True}], lr=0.1, max_grad_norm=None, bias_correction=True)
    w.grad = torch.full_like(w, 0.5)
    opt.track_stats = True
    opt.step()
    assert opt.last_stats["trust_ratio"].tolist() == [1.0]
    # first step with bias correction: u = g / (|g| + eps) ~ 1, so w = -lr
    torch.testing.assert_close(w.detach(), torch.full_like(w, -0.1), rtol=1e-5, atol=1e-6)


def test_step_never_modifies_grad_and_state_dict_round_trip_continues_identically():
    model = small_mlp()
    grads = _grads(model, 4, scale=3.0)
    opt = LAMB(param_groups(model, 0.1), max_grad_norm=1.0)
    steps_with(model, opt, grads[:2], LRS[:2])
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads[1]))
    twin = copy.deepcopy(model)
    opt_twin = LAMB(param_groups(twin, 0.1), max_grad_norm=1.0)
    opt_twin.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert opt_twin.param_groups[0]["step"] == 2
    for a, b in zip(
        steps_with(model, opt, grads[2:], LRS[2:]), steps_with(twin, opt_twin, grads[2:], LRS[2:])
    ):
        assert torch.equal(a, b)


def test_bf16_params_use_fp32_state():
    model = small_mlp(dtype=torch.float32).to(torch.bfloat16)
    opt = LAMB(model.parameters(), weight_decay=0.1)
    steps_with(model, opt, _grads(model, 2), LRS[:2])
    for p in model.parameters():
        assert {k: v.dtype for k, v in opt.state[p].items()} == dict.fromkeys(
            ["master_weight", "exp_avg", "exp_avg_sq"], torch.float32
        )
        assert torch.equal(p.detach(), opt.state[p]["master_weight"].to(torch.bfloat16))


def test_dispatched_ops_do_not_grow_with_the_number_of_tensors():
    def ops(num_layers: int) -> int:
        model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)) for _ in range(num_layers)])
        opt = LAMB(param_groups(model, 0.1))
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
        return count_ops(opt.step)

    assert ops(3) == ops(24)


@pytest.mark.parametrize(
    "kwargs",
    [{"lr": -1.0}, {"eps": -1.0}, {"weight_decay": -1.0}, {"betas": (0.9, 1.0)}, {"max_grad_norm": -1.0}],
)
def test_bad_arguments_raise_value_error_naming_the_key(kwargs):
    (key,) = kwargs
    if key != "max_grad_norm":  # an Adam argument: torch's Adam refuses the same value with the same type
        with pytest.raises(ValueError):
            torch.optim.Adam(small_mlp().parameters(), **kwargs)
    with pytest.raises(ValueError, match=f"{key}="):
        LAMB(small_mlp().parameters(), **kwargs)


def authors_lamb(weights, is_bn, grads_per_step, *, init_lr, warmup, total, wd, b1=0.9, b2=0.999, eps=1e-6):
    """fastalgo/imagenet_resnet50_lamb optimization.py (b778c4c), written out in float64:

    lr(step) = step * init_lr / warmup if step <= warmup else (total - step) * init_lr / (total - warmup)
    grads = tf.clip_by_global_norm(grads, 1.0)                          # g * 1 / max(||G||, 1)
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  u = m / (sqrt(v) + eps)   # no bias correction
    if "batch_normalization" not in name: u += wd w; ratio = ||w|| / ||u|| (1 if either is 0) else ratio = 1
    w -= ratio * lr * u
    """
    weights = [w.clone().double() for w in weights]
    m = [torch.zeros_like(w) for w in weights]
    v = [torch.zeros_like(w) for w in weights]
    lrs = []
    for step, grads in enumerate(grads_per_step):
        lr = step * init_lr / warmup if step <= warmup else (total - step) * init_lr / (total - warmup)
        lrs.append(lr)
        global_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads)).item()
        grads = [g * 1.0 / max(global_norm, 1.0) for g in grads]
        for i, (w, g) in enumerate(zip(weights, grads)):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g.square()
            update = m[i] / (v[i].sqrt() + eps)
            ratio = 1.0
            if not is_bn[i]:
                update = update + wd * w
                w_norm, u_norm = w.norm(), update.norm()
                ratio = (w_norm / u_norm).item() if w_norm > 0 and u_norm > 0 else 1.0
            weights[i] = w - ratio * lr * update
    return weights, lrs


def test_matches_the_authors_resnet50_code_over_24_steps():
    """lamb_32k's optimizer: no bias correction, only BN excluded (the FC bias is decayed and adapted), clip 1.0."""
    model = small_mlp()
    start = [p.detach().clone() for p in model.parameters()]
    is_bn = [name.startswith("1.") for name, _ in model.named_parameters()]  # Sequential index 1 is the BN
    assert is_bn == [False, False, True, True, False, False]
    generator = torch.Generator().manual_seed(2)
    # gradient norms from ~0.3 to ~3: the global clip at 1.0 acts on some steps and not on others
    grads = [
        [
            (0.1 + 0.2 * (step % 7)) * torch.randn(p.shape, generator=generator, dtype=torch.float64)
            for p in model.parameters()
        ]
        for step in range(24)
    ]
    expected, lrs = authors_lamb(start, is_bn, grads, init_lr=0.04, warmup=6, total=24, wd=1.5)
    assert len(set(lrs)) > 10  # warmup from 0, then linear decay: a changing LR
    opt = LAMB(
        param_groups(model, 1.5, "norm_layers"),
        betas=(0.9, 0.999),
        eps=1e-6,
        max_grad_norm=1.0,
        bias_correction=False,
    )
    assert [(g["trust_adaptation"], g["weight_decay"], g["param_names"]) for g in opt.param_groups] == [
        (True, 1.5, ["0.weight", "0.bias", "3.weight", "3.bias"]),
        (False, 0.0, ["1.weight", "1.bias"]),
    ]
    ours = steps_with(model, opt, grads, lrs)
    for got, want, before in zip(ours, expected, start):
        assert (want - before).abs().max() > 1e-3
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_compiled_step_keeps_grad_and_does_not_recompile_when_lr_and_step_change():
    """The lr (a schedule) and the bias corrections (the step count) change every step: no recompilation."""
    from torch._dynamo.utils import counters

    model = small_mlp()
    opt = LAMB(param_groups(model, 0.1), implementation="compiled")
    grads = _grads(model, len(LRS))
    counters.clear()
    steps_with(model, opt, grads[:1], LRS[:1])
    compiled = counters["stats"]["unique_graphs"]
    # a direction per group; an apply per adapted group (the others take step 5 inside their direction)
    adapted = sum(1 for group in opt.param_groups if group["trust_adaptation"])
    assert compiled == len(opt.param_groups) + adapted
    kept = [g.clone() for g in grads[-1]]  # p.grad of the last step
    steps_with(model, opt, grads[1:], LRS[1:])
    assert counters["stats"]["unique_graphs"] == compiled, dict(counters["recompiles"])
    assert opt.implementation == "compiled"
    for p, g in zip(model.parameters(), kept):
        assert torch.equal(p.grad.double(), g)
