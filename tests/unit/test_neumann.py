"""Neumann optimizer against a float64 reference written here from the paper (arXiv 1712.03298, Algorithm 2 and
Table 1), not from the implementation: one weight vector, numpy-free torch float64 math, its own reset
bookkeeping. Also: exact resume through state_dict, the evaluation weights w - mu m, one-line errors."""

import copy
import io
import itertools
import math

import pytest
import torch
from helpers import small_mlp
from torch import nn

from lightning_lars.optim.neumann import Neumann, is_reset, momentum
from lightning_lars.optim.param_groups import param_groups

HYPER = {
    "alpha": 0.05,
    "beta": 1e-4,
    "gamma": 0.9,
    "mu_min": 0.5,
    "mu_max": 0.9,
    "momentum_time_unit": 2,
    "sgd_steps": 2,
    "reset_steps": 3,
    "reset_growth": 2,
}  # alpha, beta, gamma large: both terms count
WEIGHT_DECAY = 1e-3
STEPS = 26  # burn-in 1-2, Neumann t = 1..24: resets at t = 1, 4, 10, 22 (periods 3, 6, 12)


# the model: a seeded float64 Linear(5, 4) -> BatchNorm1d -> Tanh -> Linear(4, 3) (smooth, so every step moves)
NET = {"sizes": (5, 4, 3), "dtype": torch.float64, "activation": nn.Tanh}


def batches(n: int):
    gen = torch.Generator().manual_seed(1)
    return [
        (torch.randn(16, 5, generator=gen, dtype=torch.float64), torch.randint(0, 3, (16,), generator=gen))
        for _ in range(n)
    ]


def lr_at(step: int) -> float:
    return 0.05 * (1.0 + 0.5 * math.sin(step))  # changes every step


def loss_of(model, batch):
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def reference(model: nn.Module, data) -> list[dict]:
    """Algorithm 2 on the flat weight vector, float64. Returns, after each step, w, m and mu."""
    params = list(model.parameters())
    flat = lambda tensors: torch.cat([t.reshape(-1) for t in tensors])
    w = flat([p.detach() for p in params]).clone()
    decay = flat([torch.full_like(p, WEIGHT_DECAY if p.ndim >= 2 else 0.0) for p in params])
    v, m = w.clone(), torch.zeros_like(w)  # line 1
    n = w.numel()
    next_reset, period = 1, HYPER["reset_steps"]
    out = []
    for s, batch in enumerate(data, 1):
        torch.nn.utils.vector_to_parameters(w, params)
        model.zero_grad()
        loss_of(model, batch).backward()
        g = flat([p.grad for p in params]) + decay * w
        lr, mu = lr_at(s), None
        t = s - HYPER["sgd_steps"]
        if t <= 0:  # line 2: vanilla SGD
            w = w - lr * g
        elif t == next_reset:  # lines 6-7; Table 1: the period doubles after every reset
            m = -lr * g
            next_reset, period = next_reset + period, period * HYPER["reset_growth"]
        else:
            mu = min(HYPER["mu_max"], max(HYPER["mu_min"], 1 - 1 / (1 + t / HYPER["momentum_time_unit"])))
            diff = w - v
            r = diff.norm()
            d = g + (HYPER["alpha"] * r**2 - HYPER["beta"] * n / r**2) * diff / r  # line 9, eq. (8)
            m = mu * m - lr * d  # line 10
            w = w + mu * m - lr * d  # line 11
            v = w + HYPER["gamma"] * (v - w)  # line 12
        out.append({"w": w.clone(), "m": m.clone(), "t": t})
    return out


def run(model: nn.Module, data, optimizer=None, first_step: int = 1):
    optimizer = optimizer or Neumann(
        param_groups(model, WEIGHT_DECAY), lr=lr_at(1), **HYPER, weight_decay=WEIGHT_DECAY
    )
    seen = []
    for s, batch in enumerate(data, first_step):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(s)  # what the schedule callback does
        optimizer.zero_grad()
        loss_of(model, batch).backward()
        optimizer.step()
        seen.append(torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone())
    return optimizer, seen


def test_schedule_functions_follow_table_1():
    assert [t for t in range(1, 40) if is_reset(t, 3, 2)] == [1, 4, 10, 22]
    assert [t for t in range(1, 12) if is_reset(t, 3, 1)] == [1, 4, 7, 10]  # Algorithm 2: t = 1 mod K
    assert [t for t in range(1, 9) if is_reset(t, 0, 2)] == [1]
    assert momentum(1, 0.5, 0.9, 1) == 0.5 and momentum(9, 0.5, 0.9, 1) == pytest.approx(0.9)
    assert momentum(4, 0.5, 0.9, 1) == pytest.approx(0.8) and momentum(1000, 0.5, 0.9, 1) == 0.9


def test_matches_float64_reference_over_resets_and_changing_lr():
    data = batches(STEPS)
    expected = reference(small_mlp(**NET), data)
    model = small_mlp(**NET)
    _, seen = run(model, data)
    for step, (ref, got) in enumerate(zip(expected, seen), 1):
        assert torch.allclose(got, ref["w"], rtol=0, atol=1e-12), (
            f"step {step}: {(got - ref['w']).abs().max()}"
        )
    moved = [not torch.equal(a, b) for a, b in itertools.pairwise(seen)]
    assert moved.count(False) == 4  # the four reset steps move no weight; every other step does


def test_regulariser_terms_change_the_trajectory():
    """The reference match above would hold with alpha = beta = 0 only if the terms were negligible."""
    data = batches(12)
    _, with_terms = run(small_mlp(**NET), data)
    plain = small_mlp(**NET)
    optimizer = Neumann(
        param_groups(plain, WEIGHT_DECAY),
        lr=lr_at(1),
        **{**HYPER, "alpha": 0.0, "beta": 0.0},
        weight_decay=WEIGHT_DECAY,
    )
    _, without = run(plain, data, optimizer)
    assert (with_terms[-1] - without[-1]).abs().max() > 1e-4


def test_evaluation_weights_are_w_minus_mu_m_and_training_weights_come_back_exactly():
    data = batches(9)  # ends at t = 7, mid-period
    expected = reference(small_mlp(**NET), data)[-1]
    model = small_mlp(**NET)
    optimizer, seen = run(model, data)
    mu = momentum(expected["t"], HYPER["mu_min"], HYPER["mu_max"], HYPER["momentum_time_unit"])
    with optimizer.evaluation_weights():
        inside = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    after = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    assert torch.allclose(inside, expected["w"] - mu * expected["m"], rtol=0, atol=1e-12)
    assert torch.equal(after, seen[-1])


def test_resume_mid_run_equals_uninterrupted():
    data = batches(STEPS)
    _, whole = run(small_mlp(**NET), data)
    first = small_mlp(**NET)
    optimizer, _ = run(first, data[:11])
    saved = io.BytesIO()
    torch.save({"model": first.state_dict(), "optimizer": optimizer.state_dict()}, saved)
    saved.seek(0)
    state = torch.load(saved, weights_only=True)
    second = small_mlp(**NET)
    second.load_state_dict(state["model"])
    resumed = Neumann(param_groups(second, WEIGHT_DECAY), lr=0.0, **HYPER, weight_decay=WEIGHT_DECAY)
    resumed.load_state_dict(state["optimizer"])
    _, rest = run(second, data[11:], resumed, first_step=12)
    for step, (a, b) in enumerate(zip(whole[11:], rest), 12):
        assert torch.equal(a, b), f"step {step}"


def test_zero_distance_to_the_moving_average_drops_the_regulariser():
    """Without burn-in the first update step finds w = v: no direction for the terms, no division by zero."""
    model = small_mlp(**NET)
    optimizer = Neumann(model.parameters(), lr=0.1, reset_steps=0)
    for _ in range(3):
        optimizer.zero_grad()
        loss_of(model, batches(1)[0]).backward()
        optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize(
    "key, value",
    [
        ("lr", -0.1),
        ("alpha", -1.0),
        ("beta", -1e-5),
        ("gamma", 1.0),
        ("mu_min", 0.95),
        ("mu_max", 1.0),
        ("momentum_time_unit", 0),
        ("sgd_steps", -1),
        ("sgd_steps", 2.5),
        ("reset_steps", -400),
        ("reset_growth", 0),
        ("weight_decay", -1e-4),
    ],
)
def test_bad_hyperparameter_is_one_line_naming_the_key(key, value):
    whole = key in ("momentum_time_unit", "sgd_steps", "reset_steps", "reset_growth")
    kind = TypeError if whole and value != int(value) else ValueError  # torch's split: wrong type, bad value
    with pytest.raises(kind) as error:
        Neumann(small_mlp(**NET).parameters(), **{key: value})
    message = str(error.value)
    assert "\n" not in message and f"{key}={value}" in message and f"optimizer.{key}" in message


def test_plain_parameters_split_by_the_exclusion_rule():
    model = small_mlp(**NET)
    optimizer = Neumann(model.parameters(), weight_decay=1e-4)
    kept, excluded = optimizer.param_groups
    assert all(p.ndim >= 2 for p in kept["params"]) and kept["weight_decay"] == 1e-4
    assert all(p.ndim == 1 for p in excluded["params"]) and excluded["weight_decay"] == 0.0
    assert optimizer.num_scalars == sum(p.numel() for p in model.parameters())
    assert copy.deepcopy(optimizer.state_dict())["param_groups"][0]["step"] == 0


def test_lightning_validation_sees_the_returned_weights_and_training_resumes_from_the_displaced_ones():
    """A real Trainer fit with the evaluation callback: validation runs on w - mu m; training weights come back."""
    import lightning as L
    from lightning_lars.callbacks.techniques.neumann_evaluation import NeumannEvaluationWeights

    data = batches(5)

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = small_mlp(**NET)
            self.seen_in_validation, self.after_training = None, None

        def training_step(self, batch, batch_idx):
            return loss_of(self.net, batch)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.after_training = torch.nn.utils.parameters_to_vector(self.parameters()).detach().clone()

        def validation_step(self, batch, batch_idx):
            self.seen_in_validation = torch.nn.utils.parameters_to_vector(self.parameters()).detach().clone()

        def configure_optimizers(self):
            return Neumann(self.parameters(), lr=0.05, sgd_steps=1, reset_steps=0, momentum_time_unit=1)

    module = Tiny()
    trainer = L.Trainer(
        max_epochs=1,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[NeumannEvaluationWeights()],
    )
    loader = lambda items: torch.utils.data.DataLoader(items, batch_size=None)  # each item is one batch
    trainer.fit(module, train_dataloaders=loader(data), val_dataloaders=loader(data[:1]))
    optimizer = trainer.optimizers[0]
    t = len(data) - 1  # one SGD step, then Neumann steps 1..4 (reset at 1)
    mu = min(0.9, max(0.5, 1 - 1 / (1 + t)))  # Table 1 with t in steps
    m = torch.cat([optimizer.state[p]["neumann_iterate"].reshape(-1) for p in module.parameters()])
    now = torch.nn.utils.parameters_to_vector(module.parameters()).detach()
    assert torch.equal(now, module.after_training)  # the displaced training weights, bit for bit
    assert torch.allclose(module.seen_in_validation, now - mu * m, rtol=0, atol=1e-12)
    assert (module.seen_in_validation - now).abs().max() > 1e-6  # the swap did move something


@pytest.mark.parametrize("phase", ["sgd", "reset", "update"])
def test_dispatched_ops_do_not_grow_with_the_number_of_tensors(phase):
    """torch.profiler's top-level aten ops (the CPU proxy for GPU kernel launches) per step, at 6 vs 48 tensors."""
    from lightning_lars.optim.op_count import count_ops

    def ops(num_layers: int) -> int:
        model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)) for _ in range(num_layers)])
        opt = Neumann(param_groups(model, 1e-4), lr=0.1, sgd_steps=2, reset_steps=5)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt.step()  # the first step creates state, one op per tensor
        for _ in range({"sgd": 0, "reset": 1, "update": 2}[phase]):
            opt.step()  # s = 2 is SGD, s = 3 the reset (t = 1), s = 4 an update
        return count_ops(opt.step)

    assert ops(3) == ops(24)


def test_bf16_parameters_update_fp32_masters_and_state():
    """bf16 parameters: the algorithm runs on fp32 master weights and fp32 m, v; the parameter is their rounding."""
    torch.manual_seed(0)
    model = nn.Linear(8, 4).to(torch.bfloat16)
    optimizer = Neumann(model.parameters(), lr=0.1, sgd_steps=1, reset_steps=0)
    for _ in range(4):  # SGD, reset, two updates
        optimizer.zero_grad()
        model(torch.randn(16, 8, dtype=torch.bfloat16)).float().square().mean().backward()
        optimizer.step()
    for p in model.parameters():
        state = optimizer.state[p]
        assert {state[k].dtype for k in ("master_weight", "neumann_iterate", "moving_average")} == {
            torch.float32
        }
        assert torch.equal(p, state["master_weight"].to(torch.bfloat16))
        assert state["neumann_iterate"].abs().max() > 0
        assert not torch.equal(state["moving_average"], state["master_weight"])


def test_solves_a_convex_quadratic_as_torch_linalg_solve_does():
    """Without the regulariser, on f(w) = 1/2 w'Aw - b'w (gradients exact), the returned weights w - mu m reach
    the Newton point A^-1 b that the Neumann series inverts (sec. 2.1): oracle torch.linalg.solve."""
    gen = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(10, 10, generator=gen, dtype=torch.float64))
    a = q @ torch.diag(torch.logspace(-1, 1, 10, dtype=torch.float64)) @ q.T  # condition number 100
    b = torch.randn(10, generator=gen, dtype=torch.float64)
    w = nn.Parameter(torch.zeros(10, 1, dtype=torch.float64))  # 2-D: a kept tensor, as a conv weight is
    optimizer = Neumann([w], lr=0.05, alpha=0.0, beta=0.0, sgd_steps=5, reset_steps=100, reset_growth=2)
    for _ in range(800):
        optimizer.zero_grad()
        (0.5 * w[:, 0] @ a @ w[:, 0] - b @ w[:, 0]).backward()
        optimizer.step()
    with optimizer.evaluation_weights():
        returned = w.detach()[:, 0].clone()
    assert torch.allclose(returned, torch.linalg.solve(a, b), rtol=0, atol=1e-10)
