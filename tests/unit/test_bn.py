"""Ghost BN equals BN applied to each sub-batch; conversion keeps parameters; PFN's BN without averages."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightning_lars.core.errors import UserError
from lightning_lars.models.batch_norm import (
    GroupBatchNorm,
    average_bn_statistics,
    batch_norms,
    consecutive_rank_groups,
    convert_batch_norm,
    set_bn_momentum,
)


def affine_bn(num_features, group_size, seed=0):
    torch.manual_seed(seed)
    bn = GroupBatchNorm(num_features, group_size=group_size)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


@pytest.mark.parametrize(
    "shape, group", [((12, 3, 5, 4), 4), ((12, 3, 5, 4), 12), ((8, 6), 2), ((6, 2, 7), 3)]
)
def test_ghost_bn_equals_bn_on_each_sub_batch(shape, group):
    bn = affine_bn(shape[1], group)
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    bn = bn.double()
    y = bn(x)
    ref_x = x.detach().clone().requires_grad_(True)
    weight, bias = (
        bn.weight.detach().clone().requires_grad_(True),
        bn.bias.detach().clone().requires_grad_(True),
    )
    ref = torch.cat(
        [F.batch_norm(chunk, None, None, weight, bias, True, 0.0, bn.eps) for chunk in ref_x.split(group)]
    )
    torch.testing.assert_close(y, ref)
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    (ref * upstream).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    torch.testing.assert_close(bn.weight.grad, weight.grad)
    torch.testing.assert_close(bn.bias.grad, bias.grad)


def test_running_statistics_average_the_groups():
    bn = GroupBatchNorm(3, momentum=1.0, group_size=4)  # momentum 1: the running stats are this batch's
    x = torch.randn(8, 3, 2, 2)
    bn(x)
    chunks = x.split(4)
    means = torch.stack([c.mean(dim=(0, 2, 3)) for c in chunks]).mean(0)
    variances = torch.stack([c.var(dim=(0, 2, 3), unbiased=True) for c in chunks]).mean(0)
    torch.testing.assert_close(bn.running_mean, means)
    torch.testing.assert_close(bn.running_var, variances)
    assert int(bn.num_batches_tracked) == 1


def test_plain_group_equals_torch_batchnorm_in_train_and_eval():
    torch.manual_seed(1)
    ours, theirs = GroupBatchNorm(4), nn.BatchNorm2d(4)
    theirs.load_state_dict(ours.state_dict())
    for _ in range(3):
        x = torch.randn(6, 4, 3, 3)
        torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours.running_var, theirs.running_var)
    ours.eval(), theirs.eval()
    x = torch.randn(5, 4, 3, 3)  # eval: any batch size, running statistics
    torch.testing.assert_close(ours(x), theirs(x))


def test_channels_last_input_gives_the_same_result():
    bn = affine_bn(3, 2)
    x = torch.randn(4, 3, 5, 5)
    torch.testing.assert_close(bn(x.to(memory_format=torch.channels_last)), bn(x))


def test_a_group_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(UserError, match="does not divide the device batch"):
        GroupBatchNorm(3, group_size=4)(torch.randn(6, 3, 2, 2))


def test_convert_shares_parameters_and_buffers():
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    )
    before = [(bn.weight, bn.running_mean) for _, bn in batch_norms(model)]
    assert convert_batch_norm(model, group_size=2) == 2
    after = batch_norms(model)
    assert all(isinstance(bn, GroupBatchNorm) and bn.group_size == 2 for _, bn in after)
    assert [(bn.weight, bn.running_mean) for _, bn in after] == before
    optimizer_params = {id(p) for p in model.parameters()}
    assert all(id(w) in optimizer_params for w, _ in before)


def test_bn_without_moving_average_keeps_the_last_batch_statistics():
    model = nn.Sequential(nn.BatchNorm1d(3))
    set_bn_momentum(model, 1.0)
    model(torch.randn(10, 3))
    last = torch.randn(10, 3) * 3 + 1
    model(last)
    torch.testing.assert_close(model[0].running_mean, last.mean(0))
    torch.testing.assert_close(model[0].running_var, last.var(0, unbiased=True))
    snapshot = model[0].running_mean.clone()
    average_bn_statistics(model)  # one process: averaging over ranks leaves the statistics unchanged
    torch.testing.assert_close(model[0].running_mean, snapshot)


def test_consecutive_rank_groups_tile_the_world():
    assert consecutive_rank_groups(8, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(UserError):
        consecutive_rank_groups(6, 4)


@pytest.mark.parametrize("momentum", [0.1, None])
def test_running_statistics_equal_torch_bn_per_sub_batch_averaged(momentum):
    """Oracle: torch's BatchNorm2d run on each sub-batch from the same running statistics, then averaged."""
    torch.manual_seed(2)
    ours = GroupBatchNorm(3, momentum=momentum, group_size=4)
    state = nn.BatchNorm2d(3, momentum=momentum).state_dict()
    for _ in range(3):
        x = torch.randn(12, 3, 5, 4) * 2 + 1
        ours(x)
        copies = [nn.BatchNorm2d(3, momentum=momentum) for _ in range(3)]
        for copy, chunk in zip(copies, x.split(4)):
            copy.load_state_dict(state)
            copy(chunk)
        state = {
            **copies[0].state_dict(),
            "running_mean": torch.stack([c.running_mean for c in copies]).mean(0),
            "running_var": torch.stack([c.running_var for c in copies]).mean(0),
        }
    torch.testing.assert_close(ours.running_mean, state["running_mean"])
    torch.testing.assert_close(ours.running_var, state["running_var"])
    assert int(ours.num_batches_tracked) == int(state["num_batches_tracked"]) == 3


def saved_for_backward_bytes(module: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd keeps for backward after ``module(x)``: the activation memory."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(x)
    return sum(storages.values())


@pytest.mark.parametrize("group", [2, 4, 16])
def test_ghost_bn_keeps_as_much_for_backward_as_torch_bn(group):
    """Ghost BN is one fused batch_norm: one activation-sized tensor saved, like torch's BN (the Python form
    saved the input and four full-size intermediates)."""
    x = torch.randn(16, 8, 14, 14, requires_grad=True)
    torch_bn = saved_for_backward_bytes(nn.BatchNorm2d(8), x)
    ghost = saved_for_backward_bytes(GroupBatchNorm(8, group_size=group), x)
    assert torch_bn >= x.numel() * x.element_size()  # the oracle saves its input
    assert ghost <= 1.05 * torch_bn, f"ghost BN keeps {ghost / torch_bn:.2f}x torch BN's activations"
