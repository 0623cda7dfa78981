"""The checkpoint format of LARS, LAMB, NLCG and Neumann, pinned: the keys of every param group (in order) and of
every parameter's state, as the optimizers wrote them before they shared `LayerwiseOptimizer`. A checkpoint
written by any earlier version must load, so these lists change only together with a conversion for old files.
Also: a state dict loads into a fresh optimizer unchanged, bf16 parameters' fp32 state included."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import small_mlp

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.neumann import Neumann
from lightning_lars.optim.nlcg import NLCG
from lightning_lars.optim.param_groups import param_groups

DECAY = 1e-4
STEPS = 3
# name -> (build, the group keys torch.optim fills from the defaults, in order, per-parameter state keys)
OPTIMIZERS = {
    "lars": (lambda ps: LARS(ps, weight_decay=DECAY),
             ["lr", "momentum", "weight_decay", "trust_coefficient", "eps", "nesterov", "form", "clip",
              "trust_adaptation", "wd_coefficient"], {"momentum_buffer"}),
    "lars_you2017": (lambda ps: LARS(ps, weight_decay=DECAY, form="you2017"),
                     ["lr", "momentum", "weight_decay", "trust_coefficient", "eps", "nesterov", "form", "clip",
                      "trust_adaptation", "wd_coefficient"], {"momentum_buffer"}),
    "lamb": (lambda ps: LAMB(ps, weight_decay=DECAY),
             ["lr", "betas", "eps", "weight_decay", "bias_correction", "trust_adaptation", "step"],
             {"exp_avg", "exp_avg_sq"}),
    "nlcg": (lambda ps: NLCG(ps, weight_decay=DECAY, line_search_period=2),
             ["lr", "weight_decay", "trust_adaptation", "step", "num_losses"],
             {"h_diag", "prev_grad", "precond_grad", "direction", "scalars"}),
    "neumann": (lambda ps: Neumann(ps, weight_decay=DECAY, sgd_steps=1),
                ["lr", "weight_decay", "trust_adaptation"], {"neumann_iterate", "moving_average"}),
}
# host-int counters after STEPS steps (Neumann's "step" is not a default: each group gets it first, see Neumann)
COUNTERS = {"lamb": {"step": STEPS}, "nlcg": {"step": STEPS, "num_losses": STEPS}, "neumann": {"step": STEPS}}


def _trained(name: str, grouped: bool, dtype: torch.dtype):
    build = OPTIMIZERS[name][0]
    model = small_mlp((4, 3, 2), dtype, relu=False)
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
    assert [g["trust_adaptation"] for g in groups] == [True, False][:len(groups)]
    assert [g["weight_decay"] for g in groups] == [DECAY, 0.0][:len(groups)]
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
