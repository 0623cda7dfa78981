"""LARS/LAMB handed an FSDP1 model's raw ``parameters()``: refused with the helper to call, not trained as SGD.

FSDP1 flattens parameters into 1-D shards (one ``_flat_param`` per unit, or 1-D views with
``use_orig_params=True``); by shape the exclusion rule would exclude all of them. A real FSDP1 wrap on one
gloo process shows what a user gets.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel

from lightning_lars.core.errors import UserError
from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.param_groups import param_groups


@pytest.fixture
def one_rank():
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _wrapped(use_orig_params: bool) -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    return FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=use_orig_params)


@pytest.mark.parametrize("use_orig_params", [False, True])
@pytest.mark.parametrize(
    "make",
    [
        lambda params: LARS(params, form="mlperf"),
        lambda params: LARS(params, form="you2017"),  # adapts all: would take per-shard norms
        lambda params: LAMB(params),
    ],
    ids=["lars-mlperf", "lars-you2017", "lamb"],
)
def test_raw_fsdp1_parameters_are_refused_naming_the_helper(one_rank, use_orig_params, make):
    model = _wrapped(use_orig_params)
    flat = [p for p in model.parameters() if getattr(p, "_fsdp_flattened", False)]
    assert flat, "FSDP1 marks the parameters it flattened; without the mark the guard has nothing to read"
    with pytest.raises(UserError) as error:
        make(model.parameters())
    message = str(error.value)
    assert "\n" not in message
    assert "param_groups.param_groups(fsdp_model, weight_decay)" in message
    assert "momentum SGD" in message


def test_groups_from_the_helper_are_accepted_and_adapt_the_weights(one_rank):
    model = _wrapped(use_orig_params=True)
    optimizer = LARS(param_groups(model, 1e-4), form="mlperf", implementation="eager")
    adapted = [g for g in optimizer.param_groups if g["trust_adaptation"]]
    assert [n for g in adapted for n in g["param_names"]] == ["0.weight", "2.weight"]
    model(torch.randn(5, 4)).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_plain_module_parameters_still_pass():
    layer = nn.Linear(3, 2)
    optimizer = LARS(p for p in layer.parameters())  # no FSDP; a generator is read once
    assert [g["trust_adaptation"] for g in optimizer.param_groups] == [True, False]
    assert [g["params"] for g in optimizer.param_groups] == [[layer.weight], [layer.bias]]
