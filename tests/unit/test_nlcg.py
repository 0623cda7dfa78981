"""NLCG against a float64 reference written from the authors' equations (apple/ml-ncg 563b5e5,
``ncg_core_tfop.py`` and ``altopt_core.py``; the paper arXiv 1812.02886 gives no more than its abstract to our
tools), over 24 steps with a changing lr, on a model with weights, biases and BN; exact resume; bad input."""

from __future__ import annotations

import io
import math

import pytest
import torch
from helpers import small_mlp
from torch import nn

from lightning_lars.core.errors import UserError
from lightning_lars.optim.nlcg import NLCG
from lightning_lars.optim.param_groups import param_groups

STEPS = 24
LRS = [0.0] + [0.05 * (1 + math.sin(k)) + 0.01 for k in range(1, STEPS)]  # warmup-like 0 first, then varying
PERIOD = 3


def _inputs():
    """Gradients and losses per step, drawn once: the optimizer's math must not depend on where they came from."""
    generator = torch.Generator().manual_seed(1)
    shapes = [p.shape for p in small_mlp().parameters()]
    grads = [[torch.randn(s, generator=generator, dtype=torch.float64) for s in shapes] for _ in range(STEPS)]
    losses = (0.3 + 1.7 * torch.rand(STEPS, generator=generator, dtype=torch.float64)).tolist()
    return grads, losses


def reference(weights, grads_per_step, losses, lrs, *, adapted, decay, rule, precondition, eta, period, tau):
    """NLCG in float64 on ONE flat vector, as the authors' TF graph computes it. Returns (weights, events)."""
    sizes = [w.numel() for w in weights]
    flat = torch.cat([w.flatten() for w in weights]).double()
    h = prev_g = z_prev = d = None
    rho_prev, base_lr, ema, ema_old, events = 0.0, 1.0, 0.0, 0.0, []
    for k, (grads, loss, lr) in enumerate(zip(grads_per_step, losses, lrs)):
        ws = list(flat.split(sizes))
        gs = []
        for i, (w, g) in enumerate(zip(ws, grads)):
            g = g.flatten() + decay[i] * w  # the L2 loss term's gradient
            if eta and adapted[i]:  # altopt_core.py lars_grads_and_vars
                g = eta * w.norm() / (g.norm() + 1e-8 + 0.1 * eta * w.norm()) * g
            gs.append(g)
        g = torch.cat(gs)
        if precondition == "none" or k == 0:
            h, p = torch.ones_like(g), torch.ones_like(g)
        else:  # compute_bfgs_preconditioner
            y, s = g - prev_g, d * (lr * base_lr)
            ys, hs = y @ s, h * s
            shs = s @ hs
            if not (ys < 1e-8 or shs < 1e-8):
                h = (h - (hs * s * h + 1e-8) / (shs + 1e-8) + (y * y + 1e-8) / (ys + 1e-8)).abs()
            p = 1.0 / (h + 1e-8)
        prev_g = g
        r = -g
        z = p * r
        rho = r @ z
        if k == 0:
            d_new = z
        else:  # get_dir
            beta = (rho - (r @ z_prev if rule == "PR" else 0.0)) / (rho_prev + 1e-8)
            d_new = z + min(max(float(beta), 0.0), 1.0) * d
        step_dir = d_new
        if k == 0:
            ema = ema_old = loss
        else:
            ema = 0.7 * ema + 0.3 * loss
            if k % period == 0:  # online_line_search on the EMAs
                q = ema / ema_old
                if q < 1 + 0.01 * tau:
                    base_lr, event = min(base_lr * 1.05, 1.0), "grow"
                else:
                    for bound, factor, take in (  # noqa: B007  (the matching row is read after the break)
                        (0.15, 0.5, 0.9),
                        (0.125, 0.7, 0.7),
                        (0.10, 0.8, 0.5),
                        (0.075, 0.9, 0.3),
                        (0.05, 0.95, 0.2),
                        (0.025, 0.975, 0.1),
                        (0.01, 1.0, 0.1),
                        (-1.0, 1.0, 0.0),
                    ):
                        if q > 1 + bound * tau or bound < 0:
                            break
                    new_base = max(base_lr * factor, 1e-4)
                    t_new, t_old = lr * new_base, lr * base_lr
                    if t_new > 1e-8:
                        step_dir = ((1 - take) * t_new * d_new - take * t_old * d) / t_new
                    base_lr, event = new_base, f"shrink {factor}"
                events.append(event)
                ema_old = ema
        flat = flat + lr * base_lr * step_dir
        d, z_prev, rho_prev = d_new, z, rho
    return [w.view_as(orig) for w, orig in zip(flat.split(sizes), weights)], events


def _optimizer(model, **options):
    decay = options.pop("weight_decay", 0.0)
    options = {"line_search_period": PERIOD, **options}
    return NLCG(param_groups(model, decay), lr=LRS[0], weight_decay=decay, **options)


def _run(model, optimizer, grads_per_step, losses, steps: range):
    for k in steps:
        for p, g in zip(model.parameters(), grads_per_step[k]):
            p.grad = g.clone()
        for group in optimizer.param_groups:
            group["lr"] = LRS[k]
        before = [p.grad.clone() for p in model.parameters()]
        optimizer.step(lambda k=k: torch.tensor(losses[k], dtype=torch.float64))
        assert all(torch.equal(p.grad, b) for p, b in zip(model.parameters(), before)), "p.grad was modified"
    return [p.detach().clone() for p in model.parameters()]


CASES = [
    ("FR", "bfgs", 0.0, 0.0),
    ("PR", "bfgs", 0.001, 1e-3),
    ("FR", "none", 0.001, 0.0),
    ("PR", "none", 0.0, 1e-3),
]


@pytest.mark.parametrize("rule, precondition, eta, decay", CASES)
def test_matches_float64_reference_over_24_steps(rule, precondition, eta, decay):
    grads, losses = _inputs()
    model = small_mlp()
    adapted = [p.ndim > 1 for p in model.parameters()]
    expected, events = reference(
        [p.detach().clone() for p in model.parameters()],
        grads,
        losses,
        LRS,
        adapted=adapted,
        decay=[decay if a else 0.0 for a in adapted],
        rule=rule,
        precondition=precondition,
        eta=eta,
        period=PERIOD,
        tau=1.0,
    )
    # the drawn losses reach the growing branch and at least two shrinking bands of the line search
    assert "grow" in events and len({e for e in events if e.startswith("shrink")}) >= 2, events
    got = _run(
        model,
        _optimizer(
            model, update_rule=rule, precondition=precondition, trust_coefficient=eta, weight_decay=decay
        ),
        grads,
        losses,
        range(STEPS),
    )
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-12)


def test_resume_mid_run_equals_uninterrupted():
    grads, losses = _inputs()
    options = {"update_rule": "PR", "trust_coefficient": 0.001, "weight_decay": 1e-3}
    model = small_mlp()
    whole = _run(model, _optimizer(model, **options), grads, losses, range(STEPS))

    first = small_mlp()
    optimizer = _optimizer(first, **options)
    _run(first, optimizer, grads, losses, range(13))  # stop between two line-search checks
    buffer = io.BytesIO()
    torch.save({"model": first.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    second = small_mlp()
    second.load_state_dict(saved["model"])
    resumed = _optimizer(second, **options)
    resumed.load_state_dict(saved["optimizer"])
    for a, b in zip(_run(second, resumed, grads, losses, range(13, STEPS)), whole):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "key, value",
    [
        ("update_rule", "HS"),
        ("precondition", "lbfgs"),
        ("line_search", "wolfe"),
        ("lr", -0.1),
        ("weight_decay", -1e-4),
        ("trust_coefficient", -0.001),
        ("line_search_period", 0),
        ("line_search_threshold", 0.0),
    ],
)
def test_bad_hyperparameters_name_the_key(key, value):
    with pytest.raises(ValueError) as caught:  # as torch's optimizers: the command line names optimizer.<key>
        NLCG(small_mlp().parameters(), **{key: value})
    message = str(caught.value)
    assert "\n" not in message and f"{key}=" in message


def test_a_period_that_is_no_whole_number_is_a_type_error():
    with pytest.raises(TypeError, match="line_search_period=2.5 must be an integer >= 1"):
        NLCG(small_mlp().parameters(), line_search_period=2.5)


def test_steps_without_a_loss_warn_and_skip_the_line_search():
    """torch's GradScaler (precision=16-mixed) steps without a closure: NLCG still steps, the line search waits
    for losses, and the first loss starts the EMAs as step 0's does."""
    grads, _ = _inputs()
    model = small_mlp()
    optimizer = _optimizer(model)
    for p, g in zip(model.parameters(), grads[0]):
        p.grad = g.clone()
    optimizer.step()  # silent at step 0: distributed checkpointing's state initialisation steps so, at lr 0
    with pytest.warns(UserWarning, match="line_search=none"):
        optimizer.step()
    first = next(model.parameters())
    assert optimizer.state[first]["scalars"][1] == 1.0  # base lr untouched
    assert optimizer.param_groups[0]["num_losses"] == 0
    optimizer.step(lambda: torch.tensor(2.0, dtype=torch.float64))
    assert optimizer.state[first]["scalars"][2:].tolist() == [2.0, 2.0]  # both EMAs start at the first loss


def test_dispatched_ops_do_not_grow_with_the_number_of_tensors():
    """Every step, line-search checks included, is a fixed number of multi-tensor ops (GPU kernel launches)."""
    from lightning_lars.optim.op_count import count_ops

    def ops(num_layers: int) -> int:
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)) for _ in range(num_layers)])
        optimizer = NLCG(
            param_groups(model, 0.1),
            weight_decay=0.1,
            update_rule="PR",
            trust_coefficient=0.001,
            line_search_period=1,
        )  # every step checks the loss
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        losses = iter([1.0, 1.2, 1.5])
        optimizer.step(lambda: next(losses))
        optimizer.step(lambda: next(losses))
        return count_ops(lambda: optimizer.step(lambda: next(losses)))

    assert ops(3) == ops(24)


def test_weight_update_sharding_refuses_nlcg():
    """ShardedUpdate steps each rank's own tensors: NLCG's inner products would cover a rank's share only."""
    import torch.distributed as dist

    from lightning_lars.parallel.sharded_update import ShardedUpdate

    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(UserError, match="optimizer_sharding=false"):
            ShardedUpdate(NLCG(small_mlp().parameters()))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("numerator_eps", [NLCG.numerator_eps, 0.0])
def test_at_small_steps_the_numerators_1e8_wears_down_h_where_the_gradient_is_zero(numerator_eps):
    """The fall of "Runs of ours" in miniature: with a tiny step <s, H s> is small, so the authors' 1e-8 in the
    correction's numerator takes ~1e-8 / <s, H s> off every entry of H each update, also where y = s = 0;
    without it (the probe's control) those entries keep H = 1, as the BFGS update without the term says."""
    generator = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.ones(2000, dtype=torch.float64))
    optimizer = NLCG([{"params": [w], "trust_adaptation": False}], lr=1e-4, line_search="none")
    optimizer.numerator_eps = numerator_eps
    for _ in range(40):
        w.grad = torch.zeros_like(w)
        w.grad[:20] = torch.randn(20, generator=generator, dtype=torch.float64)  # the rest never move
        optimizer.step()
    untouched = optimizer.state[w]["h_diag"][20:]
    if numerator_eps:
        assert untouched.max() < 0.9 and untouched.min() == untouched.max()
    else:
        assert torch.equal(untouched, torch.ones_like(untouched))
