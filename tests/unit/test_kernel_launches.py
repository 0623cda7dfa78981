"""Kernel launches per optimizer step (``op_count.count_launches``), the CPU's proxy for the GPU's host-bound
step: they must not grow with the number of tensors.

The oracle for the rule is CUDA's own: a ``torch._foreach_*`` op runs as one multi-tensor kernel only when
every list has the same sizes and strides at each index (ATen's ``can_use_fast_route``), else one kernel per
tensor. On the H200, eager LARS's ``_foreach_addcmul_`` with a list of 0-d trust ratios took the per-tensor
path: 54 of its launches per ResNet-50 step."""

from __future__ import annotations

import pytest
import timm
import torch

from lightning_lars.optim import multi_tensor
from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.nlcg import NLCG
from lightning_lars.optim.op_count import count_launches, foreach_kernels
from lightning_lars.optim.param_groups import param_groups


def test_the_rule_counts_one_launch_for_equal_lists_and_one_per_tensor_for_0d_scalars():
    xs = [torch.ones(3), torch.ones(2, 2), torch.ones(5)]
    assert foreach_kernels((xs, [x.clone() for x in xs])) == 1
    assert foreach_kernels((xs, [torch.tensor(0.5)] * 3, xs)) == 3
    assert foreach_kernels((xs, [x.t() if x.ndim == 2 else x for x in xs])) == 3  # strides differ
    ratios = torch.ones(3)
    assert count_launches(lambda: multi_tensor.add_scaled_(xs, ratios, xs)) == 3  # as 0-d tensors
    # the same vector spread over a scratch laid out like xs: a gather and one fast-path op
    spread = multi_tensor.FlatScratch(xs)
    spread.spread(ratios)  # the first call builds the index of each element's tensor
    assert count_launches(lambda: multi_tensor.add_scaled_(xs, ratios, xs, spread)) == 2


def _resnet50_like(num_tensors: int) -> torch.nn.ParameterList:
    """The first ``num_tensors`` of ResNet-50's parameters with their ranks and varied sizes, each dimension
    capped at 8 (the rule reads shapes; full sizes would only slow the test)."""
    with torch.device("meta"):
        shapes = [p.shape for p in timm.create_model("resnet50").parameters()]
    generator = torch.Generator().manual_seed(0)
    return torch.nn.ParameterList(
        torch.randn([min(s, 8) for s in shape], generator=generator) for shape in shapes[:num_tensors]
    )


OPTIMIZERS = {
    "LARS mlperf": lambda groups: LARS(groups, lr=1.0, form="mlperf"),
    "LARS nvidia nesterov clip": lambda groups: LARS(groups, lr=1.0, form="nvidia", nesterov=True, clip=True),
    "LAMB": lambda groups: LAMB(groups, lr=1e-3),
}


def _launches(make, num_tensors: int, scaled: bool) -> int:
    params = _resnet50_like(num_tensors)
    optimizer = make(param_groups(params, 5e-5))
    for p in params:
        p.grad = torch.randn_like(p)
    if scaled:  # as GradScaler.step hands them over (test_loss_scale checks it does)
        optimizer.grad_scale, optimizer.found_inf = torch.tensor(1024.0), torch.tensor(0.0)
    optimizer.step()  # the first step creates state, one op per tensor
    return count_launches(optimizer.step)


@pytest.mark.parametrize("scaled", [False, True], ids=["fp32", "under a grad scaler"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_launches_per_step_do_not_grow_with_the_number_of_tensors(name, scaled):
    # before the per-tensor factors were spread: LARS mlperf 73 launches for 161 tensors, 36 for 50
    assert _launches(OPTIMIZERS[name], 50, scaled) == _launches(OPTIMIZERS[name], 161, scaled)


def test_the_scratch_views_keep_channels_last_strides_so_the_fast_path_still_holds():
    conv = torch.randn(8, 3, 3, 3).to(memory_format=torch.channels_last)
    weights = [conv, torch.randn(8), torch.randn(8, 5).t()]  # the last is not dense in its own order
    assert not multi_tensor.FlatScratch.fits(weights)
    spread = multi_tensor.FlatScratch(weights[:2])
    assert [v.stride() for v in spread.views] == [conv.stride(), (1,)]
    ratios = torch.tensor([2.0, 3.0])
    views = spread.spread(ratios)
    assert torch.equal(views[0], torch.full_like(conv, 2.0)) and torch.equal(views[1], torch.full((8,), 3.0))
    assert foreach_kernels((weights[:2], views, weights[:2])) == 1


def _nlcg_launches(num_tensors: int) -> int:
    params = _resnet50_like(num_tensors)
    optimizer = NLCG(
        param_groups(params, 5e-5), weight_decay=5e-5, update_rule="PR", trust_coefficient=0.001,
        line_search_period=1,
    )  # fmt: skip  # every step checks the loss, so the take-back path runs too
    for p in params:
        p.grad = torch.randn_like(p)
    losses = iter([1.0, 1.2, 1.5])
    optimizer.step(lambda: next(losses))
    optimizer.step(lambda: next(losses))  # the first two create the state and the previous direction
    return count_launches(lambda: optimizer.step(lambda: next(losses)))


def test_nlcgs_step_does_not_grow_with_the_number_of_tensors_either():
    # before: its step size, one value for all of a group's tensors, went in as a vector of 0-d tensors
    assert _nlcg_launches(50) == _nlcg_launches(161)
