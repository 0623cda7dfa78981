"""The checkpoint format of LARS, LAMB, NLCG and Neumann, pinned: the keys of every param group (in order) and of
every parameter's state, as the optimizers wrote them before they shared `LayerwiseOptimizer`. A checkpoint
written by any earlier version must load, so these lists change only together with a conversion for old files.
Also: a state dict loads into a fresh optimizer unchanged, bf16 parameters' fp32 state included. And
`LayerwiseOptimizer` itself, on a minimal SGD subclass, against torch.optim.SGD and torch.optim.Optimizer: the
param-group split by the exclusion rule, fp32 state through load_state_dict, the closure call."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import small_mlp

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.layerwise import LayerwiseOptimizer
from lightning_lars.optim.neumann import Neumann
from lightning_lars.optim.nlcg import NLCG
from lightning_lars.optim.param_groups import param_groups

DECAY = 1e-4
STEPS = 3
# name -> (build, the group keys torch.optim fills from the defaults, in order, per-parameter state keys)
OPTIMIZERS = {
    "lars": (
        lambda ps: LARS(ps, weight_decay=DECAY),
        [
            "lr",
            "momentum",
            "weight_decay",
            "trust_coefficient",
            "eps",
            "nesterov",
            "form",
            "clip",
            "trust_adaptation",
            "wd_coefficient",
        ],
        {"momentum_buffer"},
    ),
    "lars_you2017": (
        lambda ps: LARS(ps, weight_decay=DECAY, form="you2017"),
        [
            "lr",
            "momentum",
            "weight_decay",
            "trust_coefficient",
            "eps",
            "nesterov",
            "form",
            "clip",
            "trust_adaptation",
            "wd_coefficient",
        ],
        {"momentum_buffer"},
    ),
    "lamb": (
        lambda ps: LAMB(ps, weight_decay=DECAY),
        ["lr", "betas", "eps", "weight_decay", "bias_correction", "trust_adaptation", "step"],
        {"exp_avg", "exp_avg_sq"},
    ),
    "nlcg": (
        lambda ps: NLCG(ps, weight_decay=DECAY, line_search_period=2),
        ["lr", "weight_decay", "trust_adaptation", "step", "num_losses"],
        {"h_diag", "prev_grad", "precond_grad", "direction", "scalars"},
    ),
    "neumann": (
        lambda ps: Neumann(ps, weight_decay=DECAY, sgd_steps=1),
        ["lr", "weight_decay", "trust_adaptation"],
        {"neumann_iterate", "moving_average"},
    ),
}
# host-int counters after STEPS steps (Neumann's "step" is not a default: each group gets it first, see Neumann)
COUNTERS = {"lamb": {"step": STEPS}, "nlcg": {"step": STEPS, "num_losses": STEPS}, "neumann": {"step": STEPS}}


def _trained(name: str, grouped: bool, dtype: torch.dtype):
    build = OPTIMIZERS[name][0]
    model = small_mlp((4, 3, 2), dtype, activation=torch.nn.Identity)  # linear: no ReLU
    optimizer = build(param_groups(model, DECAY) if grouped else model.parameters())
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1)).to(dtype)

    def closure():
        optimizer.zero_grad()
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss

    for _ in range(STEPS):
        optimizer.step(closure)
    return model, optimizer


def _expected_keys(name: str, given: list[str]) -> list[str]:
    """``given``: the keys the group had before torch added the defaults; state_dict puts ``params`` last."""
    leading = (["step"] if name == "neumann" else []) + given
    return leading + [k for k in OPTIMIZERS[name][1] if k not in leading] + ["params"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("grouped", [False, True], ids=["plain_parameters", "param_groups"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_state_dict_keys_are_the_pre_refactor_format(name, grouped, dtype):
    _, optimizer = _trained(name, grouped, dtype)
    saved = optimizer.state_dict()
    groups = saved["param_groups"]
    if grouped:
        given = [["param_names", "weight_decay", "trust_adaptation"]] * 2
    elif name == "lars_you2017":  # adapts and decays every tensor of a group that does not say
        given = [["trust_adaptation"]]
    else:  # split by the exclusion rule; the excluded part gets weight_decay 0
        given = [["trust_adaptation"], ["trust_adaptation", "weight_decay"]]
    assert [list(g) for g in groups] == [_expected_keys(name, keys) for keys in given]
    assert [g["trust_adaptation"] for g in groups] == [True, False][: len(groups)]
    assert [g["weight_decay"] for g in groups] == [DECAY, 0.0][: len(groups)]
    for key, value in COUNTERS.get(name, {}).items():
        assert [g[key] for g in groups] == [value] * len(groups)
    state_keys = OPTIMIZERS[name][2] | ({"master_weight"} if dtype == torch.bfloat16 else set())
    assert sorted(saved["state"]) == list(range(6))
    assert all(set(s) == state_keys for s in saved["state"].values())
    assert all(t.dtype == torch.float32 for s in saved["state"].values() for t in s.values())


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_state_dict_loads_unchanged_with_bf16_state_kept_in_fp32(name):
    model, optimizer = _trained(name, grouped=True, dtype=torch.bfloat16)
    saved = copy.deepcopy(optimizer.state_dict())
    fresh = OPTIMIZERS[name][0](param_groups(model, DECAY))
    fresh.load_state_dict(saved)  # torch alone would cast the fp32 masters and buffers to bf16
    loaded = fresh.state_dict()
    assert loaded["param_groups"] == saved["param_groups"]
    assert loaded["state"].keys() == saved["state"].keys()
    for index, state in saved["state"].items():
        assert loaded["state"][index].keys() == state.keys()
        for key, value in state.items():
            assert loaded["state"][index][key].dtype == torch.float32
            assert torch.equal(loaded["state"][index][key], value), f"{index}.{key}"


# --- LayerwiseOptimizer itself, on a minimal subclass, against torch.optim ------------------------------


class DecayedSGD(LayerwiseOptimizer):
    """torch.optim.SGD without momentum (L2 decay added to the gradient), as a LayerwiseOptimizer."""

    def __init__(self, params, lr: float = 0.1, weight_decay: float = 0.0, adapt_all: bool = False):
        self.adapt_all = adapt_all  # read by add_param_group, which torch calls from __init__
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def adapts_all(self, param_group: dict) -> bool:
        return self.adapt_all

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.closure_loss(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:  # torch's single-tensor SGD, line for line
                    grad = p.grad.add(p, alpha=group["weight_decay"]) if group["weight_decay"] else p.grad
                    p.add_(grad, alpha=-group["lr"])
        return loss


def by_rule(model: torch.nn.Module) -> tuple[list, list]:
    """The exclusion rule from its source (nanoGPT's ``p.dim() >= 2`` decays; MLPerf excludes BN and biases),
    written out here: (adapted, excluded) named parameters in model order."""
    named = list(model.named_parameters())
    return [(n, p) for n, p in named if p.dim() >= 2], [(n, p) for n, p in named if p.dim() < 2]


def ids(params) -> list[int]:
    return [id(p) for p in params]


def test_plain_parameters_are_split_as_explicit_groups_and_train_like_torch_sgd_given_them():
    model, reference = small_mlp(), small_mlp()
    ours = DecayedSGD(model.parameters(), lr=0.05, weight_decay=0.1)
    adapted, excluded = by_rule(reference)
    torch_sgd = torch.optim.SGD(
        [{"params": [p for _, p in adapted]}, {"params": [p for _, p in excluded], "weight_decay": 0.0}],
        lr=0.05,
        weight_decay=0.1,
        foreach=False,
    )
    assert [len(g["params"]) for g in ours.param_groups] == [len(adapted), len(excluded)]
    assert ids(ours.param_groups[0]["params"]) == ids(p for n, p in by_rule(model)[0])
    assert [g["trust_adaptation"] for g in ours.param_groups] == [True, False]
    decays = [g["weight_decay"] for g in torch_sgd.param_groups]
    assert [g["weight_decay"] for g in ours.param_groups] == decays == [0.1, 0.0]

    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for _ in range(3):
        losses = []
        for net, optimizer in ((model, ours), (reference, torch_sgd)):

            def closure(net=net, optimizer=optimizer):
                optimizer.zero_grad()
                loss = net(x).pow(2).mean()
                loss.backward()
                return loss

            losses.append(optimizer.step(closure))  # step runs under no_grad; the closure needs gradients
        assert torch.equal(losses[0], losses[1])
    for (name, mine), theirs in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(mine, theirs), name
    assert not torch.equal(model[0].weight, small_mlp()[0].weight)  # it did train


def test_named_parameters_keep_their_names_in_each_part():
    model = small_mlp()
    ours = DecayedSGD(model.named_parameters(), weight_decay=0.1)
    adapted, excluded = by_rule(model)
    names = [[n for n, _ in adapted], [n for n, _ in excluded]]
    assert [g["param_names"] for g in ours.param_groups] == names
    assert ids(ours.param_groups[1]["params"]) == ids(p for _, p in excluded)


def test_a_group_that_states_trust_adaptation_and_an_adapt_all_optimizer_are_not_split():
    model = small_mlp()
    stated = DecayedSGD([{"params": model.parameters(), "trust_adaptation": False}], weight_decay=0.1)
    everything = DecayedSGD(model.parameters(), weight_decay=0.1, adapt_all=True)
    for optimizer, adapted in ((stated, False), (everything, True)):
        (group,) = optimizer.param_groups
        assert ids(group["params"]) == ids(model.parameters())
        assert group["trust_adaptation"] is adapted and group["weight_decay"] == 0.1


def test_a_group_added_later_is_split_too():
    first, later = small_mlp(), small_mlp((3, 4, 2))
    ours = DecayedSGD([{"params": first.parameters(), "trust_adaptation": True}], weight_decay=0.1)
    ours.add_param_group({"params": later.parameters()})
    adapted, excluded = by_rule(later)
    assert [ids(g["params"]) for g in ours.param_groups[1:]] == [
        ids(p for _, p in adapted),
        ids(p for _, p in excluded),
    ]
    assert [g["weight_decay"] for g in ours.param_groups] == [0.1, 0.1, 0.0]


class PlainOptimizer(torch.optim.Optimizer):
    """The control: torch.optim.Optimizer's own load_state_dict."""

    def __init__(self, params):
        super().__init__(params, {"lr": 0.1})


def test_load_state_dict_keeps_the_fp32_state_of_bf16_parameters_that_torch_alone_casts():
    model = small_mlp(dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(3)
    saved_by = DecayedSGD(model.parameters())
    for p in model.parameters():
        saved_by.state[p]["buffer"] = torch.randn(p.shape, generator=generator) / 3  # fp32 bf16 cannot hold
        saved_by.state[p]["step"] = torch.tensor(7)  # torch keeps a "step" as it is
    saved = copy.deepcopy(saved_by.state_dict())

    control = PlainOptimizer([{"params": g["params"]} for g in saved_by.param_groups])
    control.load_state_dict(saved)
    assert all(control.state[p]["buffer"].dtype == torch.bfloat16 for p in model.parameters())

    fresh = DecayedSGD(model.parameters())
    fresh.load_state_dict(saved)
    order = [p for g in fresh.param_groups for p in g["params"]]
    for index, p in enumerate(order):
        for key, value in saved["state"][index].items():
            assert fresh.state[p][key].dtype == value.dtype, (index, key)
            assert torch.equal(fresh.state[p][key], value), (index, key)


def test_no_closure_gives_no_loss_and_a_closure_runs_with_gradients_on():
    model = small_mlp()
    ours = DecayedSGD(model.parameters())
    assert ours.step() is None
    seen = []

    def closure():
        seen.append(torch.is_grad_enabled())
        return torch.tensor(1.5)

    with torch.no_grad():  # as Lightning's manual optimisation may call it
        assert torch.equal(ours.step(closure), torch.tensor(1.5))
    assert seen == [True]
