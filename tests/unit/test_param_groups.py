"""The one visible exclusion rule and the param groups built from it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lightning_lars.core.errors import UserError
from lightning_lars.optim.param_groups import excluded, param_groups, split_unresolved


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)
        self.frozen = nn.Linear(2, 2)
        self.frozen.requires_grad_(False)


def test_excluded_is_ndim_at_most_one():
    assert excluded(torch.zeros(5)) and excluded(torch.tensor(1.0))
    assert not excluded(torch.zeros(2, 3)) and not excluded(torch.zeros(4, 3, 3, 3))


def test_default_rule_splits_bn_and_bias_from_weights_with_names():
    groups = param_groups(_Block(), weight_decay=5e-5)
    assert [(g["param_names"], g["weight_decay"], g["trust_adaptation"]) for g in groups] == [
        (["conv.weight", "fc.weight"], 5e-5, True),
        (["bn.weight", "bn.bias", "fc.bias"], 0.0, False),
    ]
    assert all(len(g["params"]) == len(g["param_names"]) for g in groups)


def test_rule_none_adapts_and_decays_every_trainable_tensor():
    (group,) = param_groups(_Block(), weight_decay=1e-4, rule="none")
    assert group["param_names"] == ["conv.weight", "bn.weight", "bn.bias", "fc.weight", "fc.bias"]
    assert group["weight_decay"] == 1e-4 and group["trust_adaptation"] is True


def test_empty_groups_are_dropped():
    (group,) = param_groups(nn.Linear(3, 2, bias=False), weight_decay=1e-4)
    assert group["trust_adaptation"] is True
    (group,) = param_groups(nn.LayerNorm(3), weight_decay=1e-4)
    assert group["trust_adaptation"] is False and group["weight_decay"] == 0.0


def test_unknown_rule_raises_user_error_naming_the_choices():
    with pytest.raises(UserError, match="ndim<=1"):
        param_groups(_Block(), weight_decay=1e-4, rule="bn_by_name")


def test_groups_work_with_torch_sgd():
    block = _Block()
    opt = torch.optim.SGD(param_groups(block, 1e-4), lr=0.1, momentum=0.9)
    assert [g["weight_decay"] for g in opt.param_groups] == [1e-4, 0.0]


def test_split_unresolved_keeps_explicit_groups_and_names():
    block = _Block()
    explicit = {"params": list(block.parameters()), "trust_adaptation": False}
    assert split_unresolved(explicit, adapt_all=False) == [explicit]
    named = {"params": list(block.named_parameters()), "weight_decay": 1e-3}
    adapted, rest = split_unresolved(named, adapt_all=False)
    assert adapted["param_names"] == ["conv.weight", "fc.weight", "frozen.weight"]
    assert adapted["weight_decay"] == 1e-3 and rest["weight_decay"] == 0.0
    assert rest["param_names"] == ["bn.weight", "bn.bias", "fc.bias", "frozen.bias"]
    (everything,) = split_unresolved(named, adapt_all=True)
    assert len(everything["params"]) == 7 and everything["trust_adaptation"] is True


def test_norm_layers_rule_excludes_only_normalisation_parameters():
    """The LAMB authors' rule: BN/LN/GN excluded by module type; conv and linear biases decayed and adapted."""
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.GroupNorm(2, 4),
        nn.Flatten(),
        nn.Linear(4, 3),
        nn.LayerNorm(3),
    )
    adapted, rest = param_groups(model, 1.5, "norm_layers")
    assert adapted["param_names"] == ["0.weight", "0.bias", "4.weight", "4.bias"]
    assert rest["param_names"] == ["1.weight", "1.bias", "2.weight", "2.bias", "5.weight", "5.bias"]
    assert (adapted["weight_decay"], adapted["trust_adaptation"]) == (1.5, True)
    assert (rest["weight_decay"], rest["trust_adaptation"]) == (0.0, False)
