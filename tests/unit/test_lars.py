"""LARS against a float64 reference written from the formulas, over several steps with a changing lr.

Differences from ``timm.optim.Lars`` (1.0.31), so parity is tested only where semantics match:
- timm adapts a group iff ``weight_decay != 0`` or ``always_adapt``; ours reads ``trust_adaptation``.
- timm has only the "nvidia" form (lr outside the buffer); no "mlperf"/"you2017" form.
- timm's default ``eps`` is 1e-8 (ours 0.0, the MLPerf rule); timm has ``dampening``, ours does not.
- timm has no whole-tensor norms under sharding, no fp32 master weights, and on CPU runs a per-tensor loop.
- timm's first step copies the increment into the buffer; ours starts from a zero buffer (same values).
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import small_mlp, steps_with
from torch import nn

from lightning_lars.optim.lars import LARS
from lightning_lars.optim.op_count import count_ops
from lightning_lars.optim.param_groups import param_groups

LRS = [0.5, 1.5, 3.0, 0.002, 2.0]  # changing lr: the momentum forms differ only then; 0.002: LARC clips


def _grads(model: nn.Module, steps: int) -> list[list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        [torch.randn(p.shape, generator=generator, dtype=torch.float64) for p in model.parameters()]
        for _ in range(steps)
    ]


def reference(weights, grads_per_step, lrs, *, adapted, decay, form, mu, eta, eps, nesterov, clip):
    """LARS in float64, one tensor at a time, straight from the formulas: You et al. 2017 (arXiv 1708.03888,
    Algorithm 1) with the LR inside the buffer, NVIDIA's MLPerf form with it outside, apex's LARC clip."""
    weights = [w.clone().double() for w in weights]
    bufs = [torch.zeros_like(w) for w in weights]
    for grads, lr in zip(grads_per_step, lrs):
        for i, (w, g) in enumerate(zip(weights, grads)):
            wd = decay[i]
            d = g + wd * w
            trust = torch.tensor(1.0, dtype=torch.float64)
            if adapted[i] and w.norm() > 0 and g.norm() > 0:
                trust = eta * w.norm() / (g.norm() + wd * w.norm() + eps)
            if adapted[i] and clip:
                trust = torch.clamp(trust / lr, max=1.0)  # effective lr = min(lr, trust): apex LARC
            increment = trust * d if form == "nvidia" else lr * trust * d
            bufs[i] = mu * bufs[i] + increment
            step = increment + mu * bufs[i] if nesterov else bufs[i]
            weights[i] = w - lr * step if form == "nvidia" else w - step
    return weights


@pytest.mark.parametrize("form", ["nvidia", "mlperf", "you2017"])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("clip", [False, True])
def test_matches_float64_reference(form, nesterov, clip):
    _check_reference(form, nesterov, clip, "eager")


# Compiling costs seconds per case on a CPU: three cases that take every branch of `compiled.lars_update`.
@pytest.mark.parametrize(
    "form, nesterov, clip", [("nvidia", True, False), ("mlperf", False, True), ("you2017", True, True)]
)
def test_compiled_step_matches_float64_reference(form, nesterov, clip):
    _check_reference(form, nesterov, clip, "compiled")


def _check_reference(form, nesterov, clip, implementation):
    model = small_mlp()
    start = [p.detach().clone() for p in model.parameters()]
    grads = _grads(model, len(LRS))
    options = {
        "momentum": 0.9,
        "trust_coefficient": 0.02,
        "eps": 1e-9,
        "nesterov": nesterov,
        "clip": clip,
        "form": form,
        "implementation": implementation,
    }
    rule = "none" if form == "you2017" else "ndim<=1"
    opt = LARS(param_groups(model, 1e-3, rule), **options)
    ours = steps_with(model, opt, grads, LRS)
    assert opt.implementation == implementation  # a compiled case that fell back would test eager twice
    adapted = [form == "you2017" or p.ndim > 1 for p in start]
    expected = reference(
        start,
        grads,
        LRS,
        adapted=adapted,
        decay=[1e-3 if a else 0.0 for a in adapted],
        form="nvidia" if form == "nvidia" else "mlperf",
        mu=0.9,
        eta=0.02,
        eps=1e-9,
        nesterov=nesterov,
        clip=clip,
    )
    for got, want, before in zip(ours, expected, start):
        assert (want - before).abs().max() > 1e-4  # the step is not empty
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_float32_params_follow_the_float64_reference():
    model = small_mlp(dtype=torch.float32)
    start = [p.detach().double() for p in model.parameters()]
    grads = _grads(model, len(LRS))
    ours = steps_with(
        model,
        LARS(model.parameters(), momentum=0.9, trust_coefficient=0.02, weight_decay=1e-3, form="nvidia"),
        grads,
        LRS,
    )
    adapted = [p.ndim > 1 for p in start]
    expected = reference(
        start,
        grads,
        LRS,
        adapted=adapted,
        decay=[1e-3 if a else 0.0 for a in adapted],
        form="nvidia",
        mu=0.9,
        eta=0.02,
        eps=0.0,
        nesterov=False,
        clip=False,
    )
    for got, want in zip(ours, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_forms_agree_at_constant_lr_and_differ_when_lr_changes():
    def final(form, lrs):
        model = small_mlp()
        return steps_with(
            model,
            LARS(model.parameters(), momentum=0.9, form=form, trust_coefficient=0.02),
            _grads(model, len(lrs)),
            lrs,
        )

    for a, b in zip(final("nvidia", [1.0] * 5), final("mlperf", [1.0] * 5)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    gap = max((a - b).abs().max() for a, b in zip(final("nvidia", LRS), final("mlperf", LRS)))
    assert gap > 1e-3


def test_plain_parameters_use_the_exclusion_rule_and_you2017_adapts_everything():
    model = small_mlp()
    mlperf = LARS(model.parameters(), weight_decay=1e-4, form="mlperf")
    assert [
        (g["trust_adaptation"], g["weight_decay"], [p.ndim for p in g["params"]]) for g in mlperf.param_groups
    ] == [(True, 1e-4, [2, 2]), (False, 0.0, [1, 1, 1, 1])]
    you = LARS(model.parameters(), weight_decay=1e-4, form="you2017")
    assert [(g["trust_adaptation"], g["weight_decay"], len(g["params"])) for g in you.param_groups] == [
        (True, 1e-4, 6)
    ]
    explicit = LARS([{"params": list(model.parameters()), "trust_adaptation": False}], weight_decay=1e-4)
    assert len(explicit.param_groups) == 1 and explicit.param_groups[0]["trust_adaptation"] is False


def test_zero_norms_give_trust_ratio_one():
    w = nn.Parameter(torch.zeros(3, 4, dtype=torch.float64))  # ||w|| = 0
    v = nn.Parameter(torch.ones(3, 4, dtype=torch.float64))  # will get ||g|| = 0
    opt = LARS(
        [{"params": [w, v], "trust_adaptation": True}],
        lr=0.5,
        momentum=0.0,
        weight_decay=0.1,
        trust_coefficient=0.001,
    )
    w.grad = torch.full_like(w, 2.0)
    v.grad = torch.zeros_like(v)
    opt.track_stats = True
    opt.step()
    assert opt.last_stats["trust_ratio"].tolist() == [1.0, 1.0]
    torch.testing.assert_close(w.detach(), torch.full_like(w, -1.0))  # -lr * (g + wd * 0)
    torch.testing.assert_close(v.detach(), torch.full_like(v, 1.0 - 0.5 * 0.1))  # -lr * (0 + wd * 1)


@pytest.mark.parametrize("implementation", ["eager", "compiled"])
def test_step_never_modifies_grad(implementation):
    model = small_mlp()
    opt = LARS(
        param_groups(model, 1e-3), momentum=0.9, nesterov=True, clip=True, implementation=implementation
    )
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    before = [p.grad.clone() for p in model.parameters()]
    for _ in range(2):
        opt.step()
    for p, g in zip(model.parameters(), before):
        assert torch.equal(p.grad, g)


def test_state_dict_round_trip_continues_identically():
    model = small_mlp()
    grads = _grads(model, 4)
    opt = LARS(param_groups(model, 1e-3), momentum=0.9, trust_coefficient=0.02)
    steps_with(model, opt, grads[:2], LRS[:2])
    twin = copy.deepcopy(model)
    opt_twin = LARS(param_groups(twin, 1e-3), momentum=0.9, trust_coefficient=0.02)
    opt_twin.load_state_dict(copy.deepcopy(opt.state_dict()))
    for a, b in zip(
        steps_with(model, opt, grads[2:], LRS[2:4]), steps_with(twin, opt_twin, grads[2:], LRS[2:4])
    ):
        assert torch.equal(a, b)


@pytest.mark.parametrize("implementation", ["eager", "compiled"])
def test_bf16_params_keep_fp32_master_weights_and_state(implementation):
    model16 = small_mlp(dtype=torch.float32).to(torch.bfloat16)
    model32 = copy.deepcopy(model16).float()  # the same bf16-rounded start, in fp32
    grads = [[g.to(torch.bfloat16).double() for g in step] for step in _grads(model16, 3)]
    options = {"momentum": 0.9, "trust_coefficient": 0.02, "weight_decay": 1e-3}
    opt16 = LARS(model16.parameters(), **options, implementation=implementation)
    steps_with(model16, opt16, grads, LRS[:3])
    assert opt16.implementation == implementation
    want = steps_with(model32, LARS(model32.parameters(), **options), grads, LRS[:3])
    for p, w in zip(model16.parameters(), want):
        state = opt16.state[p]
        assert state["master_weight"].dtype == state["momentum_buffer"].dtype == torch.float32
        torch.testing.assert_close(state["master_weight"].double(), w, rtol=1e-6, atol=1e-7)  # fp32 math
        assert torch.equal(p.detach(), state["master_weight"].to(torch.bfloat16))  # rounded once per step
    fresh = copy.deepcopy(model16)
    opt_fresh = LARS(fresh.parameters(), **options)
    opt_fresh.load_state_dict(opt16.state_dict())  # torch casts state to bf16; ours keeps fp32
    for p, q in zip(fresh.parameters(), model16.parameters()):
        assert torch.equal(opt_fresh.state[p]["master_weight"], opt16.state[q]["master_weight"])


def test_timm_parity_where_semantics_match():
    timm_optim = pytest.importorskip("timm.optim")
    for nesterov, clip in [(False, False), (True, False), (False, True)]:
        ours_model, timm_model = small_mlp(), small_mlp()
        grads = _grads(ours_model, len(LRS))
        options = {"momentum": 0.9, "nesterov": nesterov, "eps": 1e-8}
        # timm's Lars keeps the LR outside the momentum buffer: our "nvidia" form
        ours = LARS(
            param_groups(ours_model, 1e-3), trust_coefficient=0.02, clip=clip, form="nvidia", **options
        )
        theirs = timm_optim.Lars(param_groups(timm_model, 1e-3), trust_coeff=0.02, trust_clip=clip, **options)
        for a, b in zip(steps_with(ours_model, ours, grads, LRS), steps_with(timm_model, theirs, grads, LRS)):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("implementation", ["eager", "compiled"])
def test_stats_are_whole_tensor_norms_and_trust_ratios(implementation):
    model = small_mlp()
    opt = LARS(param_groups(model, 1e-3), trust_coefficient=0.02, implementation=implementation)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    weights = [p.detach().clone() for p in model.parameters() if p.ndim > 1]
    grads = [p.grad.clone() for p in model.parameters() if p.ndim > 1]
    assert opt.last_stats is None
    opt.track_stats = True
    opt.step()
    stats = opt.last_stats
    assert stats["names"] == ["0.weight", "3.weight"]
    w_norm = torch.stack([w.norm() for w in weights]).float()
    g_norm = torch.stack([g.norm() for g in grads]).float()
    torch.testing.assert_close(stats["w_norm"], w_norm)
    torch.testing.assert_close(stats["g_norm"], g_norm)
    torch.testing.assert_close(stats["trust_ratio"], 0.02 * w_norm / (g_norm + 1e-3 * w_norm))


def test_dispatched_ops_do_not_grow_with_the_number_of_tensors():
    def ops(num_layers: int) -> int:
        model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)) for _ in range(num_layers)])
        opt = LARS(param_groups(model, 1e-4), momentum=0.9, nesterov=True, clip=True)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt.step()  # the first step creates state, one op per tensor
        return count_ops(opt.step)

    assert ops(3) == ops(24)


def test_descends_the_rosenbrock_function():
    xy = nn.Parameter(torch.tensor([[-1.5, 2.0]], dtype=torch.float64))  # 2-D: adapted by the default rule
    opt = LARS([xy], lr=1.0, momentum=0.9, trust_coefficient=0.01)

    def rosenbrock():
        x, y = xy[0, 0], xy[0, 1]
        return (1 - x) ** 2 + 100 * (y - x**2) ** 2

    start = rosenbrock().item()
    for _ in range(300):
        opt.zero_grad()
        rosenbrock().backward()
        opt.step()
    assert rosenbrock().item() < start / 10


@pytest.mark.parametrize(
    "kwargs",
    [
        {"form": "tf"},
        {"momentum": 1.0},
        {"lr": -1.0},
        {"eps": -1.0},
        {"trust_coefficient": 0.0},
        {"nesterov": True, "momentum": 0.0},
        {"implementation": "jit"},
    ],
)
def test_bad_arguments_raise_value_error_as_torch_optimizers_do(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        LARS(small_mlp().parameters(), **kwargs)


def test_gradient_norms_from_the_ddp_hook_are_used_once():
    """With compute_grad_norms the comm hook leaves ||g|| per parameter in its state; LARS takes them
    instead of its own pass (same step when they are the true norms, a different one when they differ),
    pops them, and falls back to its own pass when any is missing."""
    from lightning_lars.parallel.bucket_hook import GroupedAllReduceState

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        return model, LARS(model.parameters(), lr=0.5, weight_decay=1e-4, form="mlperf")

    plain, plain_opt = make()
    plain_opt.step()
    for true_norms, should_match in ((True, True), (False, False)):
        hooked, opt = make()
        state = GroupedAllReduceState(group_caps_mb=[1.0], compute_grad_norms=True)
        opt.grad_norm_source = state
        for p in hooked.parameters():
            state.grad_norms[p] = p.grad.norm() if true_norms else 3 * p.grad.norm()
        opt.step()
        same = all(torch.equal(a, b) for a, b in zip(plain.parameters(), hooked.parameters()))
        assert same is should_match
        adapted = [p for p in hooked.parameters() if p.ndim > 1]
        assert all(p not in state.grad_norms for p in adapted)  # popped: used once
    # a missing norm: LARS computes them all itself, matching the plain step
    fallback, opt = make()
    state = GroupedAllReduceState(group_caps_mb=[1.0], compute_grad_norms=True)
    opt.grad_norm_source = state
    first = next(p for p in fallback.parameters() if p.ndim > 1)
    state.grad_norms[first] = 100 * first.grad.norm()  # only one of two adapted tensors has a norm
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), fallback.parameters()))


def test_compiled_step_does_not_recompile_when_scheduled_values_change():
    """lr, momentum and weight decay change every step (schedules do): the compiled code is reused; a change
    of structure (Nesterov on) does recompile, which shows the counter sees compilations at all. The fujitsu
    form (decay outside the lr, wd_coefficient) ends where the eager step, checked against the FJSGD kernel's
    formula elsewhere, ends."""
    from torch._dynamo.utils import counters

    model = small_mlp()
    twin = copy.deepcopy(model)
    opt = LARS(param_groups(model, 1e-3), momentum=0.9, form="fujitsu", implementation="compiled")
    eager = LARS(param_groups(twin, 1e-3), momentum=0.9, form="fujitsu", implementation="eager")
    grads = _grads(model, 6)
    counters.clear()
    steps_with(model, opt, grads[:1], LRS[:1])
    steps_with(twin, eager, grads[:1], LRS[:1])
    compiled = counters["stats"]["unique_graphs"]
    assert compiled == len(opt.param_groups)  # one graph per group
    for step, (lr, momentum, decay) in enumerate(
        zip(LRS[1:], [0.8, 0.85, 0.9, 0.95], [2e-3, 1e-3, 5e-4, 1e-4])
    ):
        for group in opt.param_groups + eager.param_groups:
            group["momentum"] = momentum
            group["wd_coefficient"] = 1.0 - 0.1 * step  # as callbacks.weight_decay_schedule sets it
            group["weight_decay"] = decay if group["trust_adaptation"] else 0.0
        got = steps_with(model, opt, grads[1 + step : 2 + step], [lr])
        want = steps_with(twin, eager, grads[1 + step : 2 + step], [lr])
    assert counters["stats"]["unique_graphs"] == compiled, dict(counters["recompiles"])
    assert opt.implementation == "compiled"
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    opt.param_groups[0]["nesterov"] = True
    steps_with(model, opt, grads[5:], LRS[:1])
    assert counters["stats"]["unique_graphs"] == compiled + 1


def test_compiled_step_falls_back_to_eager_with_one_warning_where_compiling_fails(monkeypatch):
    """A backend that cannot build kernels (as Inductor without a C++ compiler): one warning, eager steps."""

    def failing_backend(graph, example_inputs):
        raise RuntimeError("no C++ compiler found")

    real_compile = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, **_: real_compile(fn, backend=failing_backend, fullgraph=True)
    )
    model, twin = small_mlp(), small_mlp()
    grads = _grads(model, 3)
    opt = LARS(param_groups(model, 1e-3), momentum=0.9, implementation="compiled")
    with pytest.warns(UserWarning, match="runs eagerly from now on") as warned:
        got = steps_with(model, opt, grads, LRS[:3])
    assert len([w for w in warned if "runs eagerly" in str(w.message)]) == 1
    assert opt.implementation == "eager"
    want = steps_with(
        twin, LARS(param_groups(twin, 1e-3), momentum=0.9, implementation="eager"), grads, LRS[:3]
    )
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_compiled_where_dynamo_is_unsupported_warns_and_steps_eagerly(monkeypatch):
    """An interpreter torch.compile does not support (e.g. a too new Python): told at construction, not a crash."""
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    with pytest.warns(UserWarning, match="torch.compile is unsupported here"):
        opt = LARS(small_mlp().parameters(), implementation="compiled")
    assert opt.implementation == "eager"
