"""``optim.multi_tensor``, the list-gathering and fp32 bookkeeping LARS and LAMB share, against plain
per-tensor torch ops and float64 references: which tensors a group hands over, fp32 masters and gradient
copies for bf16/fp16 parameters (persistent, refreshed each step), the one-op rounding back, ``add_scaled_``,
and the fp32 state that ``torch.optim.Optimizer.load_state_dict`` would otherwise cast to bf16."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from torch import nn
from torch.optim import Optimizer

from lightning_lars.core.errors import UserError
from lightning_lars.optim import multi_tensor
from lightning_lars.optim.param_groups import UNSHARDED_SHAPE

SHAPES = [(4, 3), (3,), (5, 2, 3), (1,), (7,)]
LOW = [torch.bfloat16, torch.float16]


class Bare(Optimizer):
    """``torch.optim.Optimizer`` with nothing added: the state ``collect`` creates is the only state."""

    def __init__(self, params):
        super().__init__(params, {"lr": 0.1})


def parameters(dtype: torch.dtype, seed: int = 0) -> list[nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [nn.Parameter(torch.randn(shape, generator=generator).to(dtype)) for shape in SHAPES]


def give_grads(params: list[nn.Parameter], seed: int, skip: tuple[int, ...] = ()) -> None:
    generator = torch.Generator().manual_seed(seed)
    for i, p in enumerate(params):
        p.grad = None if i in skip else torch.randn(p.shape, generator=generator).to(p.dtype)


# --- collect -----------------------------------------------------------------------------------------------


def test_only_tensors_with_a_gradient_are_handed_over_named_by_their_place_in_the_group():
    params = parameters(torch.float32)
    give_grads(params, seed=1, skip=(1, 3))
    opt = Bare([{"params": params[:2]}, {"params": params[2:]}])
    work = multi_tensor.collect_groups(opt, lambda group: ("buf",))
    assert [len(tensors.params) for _, tensors in work] == [1, 2]
    assert [tensors.names for _, tensors in work] == [["group0.0"], ["group1.0", "group1.2"]]
    assert all(
        a is b
        for (_, t), ps in zip(work, [[params[0]], [params[2], params[4]]])
        for a, b in zip(t.params, ps)
    )


def test_a_group_without_gradients_is_skipped_and_given_names_are_kept():
    params = parameters(torch.float32)
    give_grads(params, seed=1, skip=(0, 1))
    # torch.optim wants names on every group or on none
    opt = Bare(
        [
            {"params": params[:2], "param_names": ["a", "b"]},
            {"params": params[2:], "param_names": ["c", "d", "e"]},
        ]
    )
    assert multi_tensor.collect(opt, opt.param_groups[0], 0, ()) is None
    work = multi_tensor.collect_groups(opt, lambda group: ())
    assert [group is opt.param_groups[1] for group, _ in work] == [True]
    assert work[0][1].names == ["c", "d", "e"]


def test_fp32_parameters_are_updated_in_place_and_state_starts_at_zero_in_their_dtype():
    for dtype in (torch.float32, torch.float64):
        params = parameters(dtype)
        give_grads(params, seed=1)
        opt = Bare(params)
        tensors = multi_tensor.collect(opt, opt.param_groups[0], 0, ("buf", "other"))
        assert all(w is p for w, p in zip(tensors.weights, params))  # the update writes the parameter itself
        assert all(g is p.grad for g, p in zip(tensors.grads, params))
        assert tensors.rounded == ([], [])
        for key in ("buf", "other"):
            for s, p in zip(tensors.state[key], params):
                assert s.dtype == dtype and torch.equal(s, torch.zeros_like(p))
                assert s is opt.state[p][key]
        assert all(multi_tensor.MASTER not in opt.state[p] for p in params)


@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_parameters_get_fp32_masters_grads_and_state(dtype):
    params = parameters(dtype)
    give_grads(params, seed=1)
    opt = Bare(params)
    tensors = multi_tensor.collect(opt, opt.param_groups[0], 0, ("buf",))
    for p, w, g, s in zip(params, tensors.weights, tensors.grads, tensors.state["buf"]):
        assert w.dtype == g.dtype == s.dtype == torch.float32
        assert torch.equal(w, p.detach().float())  # bf16/fp16 -> fp32 is exact
        assert torch.equal(g, p.grad.float())
        assert w is opt.state[p][multi_tensor.MASTER]
    assert all(a is b for a, b in zip(tensors.rounded[0], params))
    assert all(a is b for a, b in zip(tensors.rounded[1], tensors.weights))


@pytest.mark.parametrize("dtype", LOW)
def test_the_fp32_gradient_copies_are_refreshed_each_step_and_state_is_made_once(dtype):
    params = parameters(dtype)
    opt = Bare(params)
    give_grads(params, seed=1)
    first = multi_tensor.collect(opt, opt.param_groups[0], 0, ("buf",))
    first.state["buf"][0].fill_(3.0)  # a step wrote its state
    give_grads(params, seed=2)
    second = multi_tensor.collect(opt, opt.param_groups[0], 0, ("buf",))
    assert all(a is b for a, b in zip(first.grads, second.grads))  # persistent scratch, no new allocation
    assert all(torch.equal(g, p.grad.float()) for g, p in zip(second.grads, params))
    assert torch.equal(second.state["buf"][0], torch.full(SHAPES[0], 3.0))
    assert all(a is b for a, b in zip(first.weights, second.weights))


@pytest.mark.parametrize("dtype", LOW)
def test_each_collect_rounds_only_its_own_parameters(dtype):
    """Steps of one optimizer and of another: each collect lists this group's bf16/fp16 tensors once, so
    ``write_back`` copies what this step updated and holds no tensor of earlier steps or other optimizers."""
    mine, other = parameters(dtype), parameters(dtype, seed=1)
    give_grads(mine, seed=1)
    give_grads(other, seed=2)
    mine_opt, other_opt = Bare(mine), Bare(other)
    for _ in range(3):
        multi_tensor.collect(other_opt, other_opt.param_groups[0], 0, ())
        tensors = multi_tensor.collect(mine_opt, mine_opt.param_groups[0], 0, ())
        assert [id(p) for p in tensors.rounded[0]] == [id(p) for p in mine]
        assert [id(w) for w in tensors.rounded[1]] == [
            id(mine_opt.state[p][multi_tensor.MASTER]) for p in mine
        ]


@pytest.mark.parametrize("dtype", [torch.float32, *LOW])
def test_later_steps_hand_over_this_steps_gradients_and_the_state_loaded_since(dtype):
    """Later collects reuse the lists of the first, but each hands over the gradients set since (new tensors, as
    after ``zero_grad(set_to_none=True)``), and after ``load_state_dict`` the loaded state, not the old."""
    params = parameters(dtype)
    opt = Bare(params)
    give_grads(params, seed=1)
    multi_tensor.collect(opt, opt.param_groups[0], 0, ("buf",))
    give_grads(params, seed=2)
    second = multi_tensor.collect(opt, opt.param_groups[0], 0, ("buf",))
    assert all(torch.equal(g, p.grad.float().to(g.dtype)) for g, p in zip(second.grads, params))
    saved = opt.state_dict()
    for state in saved["state"].values():
        state["buf"] = torch.full_like(state["buf"], 7.0)
    opt.load_state_dict(saved)  # torch's own: new state dicts, new tensors
    give_grads(params, seed=3)
    third = multi_tensor.collect(opt, opt.param_groups[0], 0, ("buf",))
    assert all(
        s is opt.state[p]["buf"] and bool((s == 7.0).all()) for s, p in zip(third.state["buf"], params)
    )
    assert all(torch.equal(g, p.grad.float().to(g.dtype)) for g, p in zip(third.grads, params))
    give_grads(params, seed=4, skip=(4,))  # the fifth has no gradient this step, then has one again
    assert [id(p) for p in multi_tensor.collect(opt, opt.param_groups[0], 0, ()).params] == [
        id(p) for p in params[:4]
    ]
    give_grads(params, seed=5)
    assert len(multi_tensor.collect(opt, opt.param_groups[0], 0, ()).params) == len(params)


def test_a_sparse_gradient_is_refused():
    embedding = nn.Embedding(5, 3, sparse=True)
    embedding(torch.tensor([1, 2])).sum().backward()
    opt = Bare(embedding.parameters())
    with pytest.raises(RuntimeError, match="does not support sparse gradients"):
        multi_tensor.collect(opt, opt.param_groups[0], 0, ())


# --- write_back --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", LOW)
def test_write_back_rounds_each_master_as_torch_casts_it(dtype):
    params = parameters(dtype)
    give_grads(params, seed=1)
    opt = Bare(params)
    tensors = multi_tensor.collect(opt, opt.param_groups[0], 0, ())
    generator = torch.Generator().manual_seed(3)
    for w in tensors.weights:  # an fp32 update whose low bits the rounding must drop
        w.add_(torch.randn(w.shape, generator=generator) * 1e-3)
    with torch.no_grad():  # as in an optimizer's step
        multi_tensor.write_back(tensors)
    for p, w in zip(params, tensors.weights):
        assert torch.equal(p.detach(), w.to(dtype))  # torch's round-to-nearest-even cast, per tensor
        assert not torch.equal(p.detach().float(), w)


def test_write_back_leaves_fp32_parameters_alone():
    params = parameters(torch.float32)
    give_grads(params, seed=1)
    opt = Bare(params)
    before = [p.detach().clone() for p in params]
    with torch.no_grad():
        multi_tensor.write_back(multi_tensor.collect(opt, opt.param_groups[0], 0, ()))
    assert all(torch.equal(p, b) for p, b in zip(params, before))


# --- add_scaled_ -------------------------------------------------------------------------------------------


def lists(dtype: torch.dtype, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    ys = [torch.randn(s, generator=generator, dtype=torch.float64).to(dtype) for s in SHAPES]
    xs = [torch.randn(s, generator=generator, dtype=torch.float64).to(dtype) for s in SHAPES]
    return ys, xs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_add_scaled_with_one_scale_per_tensor_is_y_plus_scale_times_x(dtype):
    """Against the exact value, in rationals (float64 is not more precise than a float64 subject)."""
    ys, xs = lists(dtype, seed=4)
    scale = torch.linspace(-2.0, 3.0, len(SHAPES), dtype=dtype)
    exact = [
        [
            (Fraction(a) + Fraction(float(s)) * Fraction(b), abs(a) + abs(float(s) * b))
            for a, b in zip(y.flatten().tolist(), x.flatten().tolist())
        ]
        for y, s, x in zip(ys, scale, xs)
    ]
    multi_tensor.add_scaled_(ys, scale, xs)
    unit_roundoff = torch.finfo(dtype).eps / 2
    for y, expected in zip(ys, exact):
        for got, (value, size) in zip(y.flatten().tolist(), expected):
            # a product and a sum, each rounded once: |error| <= 2 u (|y| + |s x|), to first order in u
            assert abs(Fraction(got) - value) <= Fraction(2.01 * unit_roundoff * size), (got, float(value))


def test_add_scaled_with_a_python_float_matches_torchs_add_with_alpha():
    ys, xs = lists(torch.float32, seed=5)
    expected = [y.clone().add_(x, alpha=-0.37) for y, x in zip(ys, xs)]  # the per-tensor torch op
    multi_tensor.add_scaled_(ys, -0.37, xs)
    assert all(torch.equal(y, e) for y, e in zip(ys, expected))


def test_add_scaled_by_zero_writes_nothing():
    ys, xs = lists(torch.float32, seed=6)
    before = [y.clone() for y in ys]
    xs[0][0, 0] = float("inf")  # torch's y + 0 * inf would be NaN; a zero scale skips the op entirely
    multi_tensor.add_scaled_(ys, 0.0, xs)
    assert all(torch.equal(y, b) for y, b in zip(ys, before))


# --- restore_fp32_state ------------------------------------------------------------------------------------


def trained_bf16_optimizer() -> tuple[list[nn.Parameter], Bare]:
    params = parameters(torch.bfloat16) + parameters(torch.float32, seed=9)[:2]
    give_grads(params, seed=1)
    opt = Bare(params)
    tensors = multi_tensor.collect(opt, opt.param_groups[0], 0, ("buf",))
    generator = torch.Generator().manual_seed(7)
    for buf in tensors.state["buf"]:  # fp32 values bf16 cannot hold
        buf.copy_(torch.randn(buf.shape, generator=generator) / 3)
    for p in params:
        opt.state[p]["step"] = torch.tensor(5)  # an integer counter: torch leaves it alone
    return params, opt


def test_torch_alone_casts_the_fp32_state_of_bf16_parameters_to_bf16():
    """The control that makes restore_fp32_state needed: plain ``Optimizer.load_state_dict``."""
    params, opt = trained_bf16_optimizer()
    fresh = Bare(params)
    fresh.load_state_dict(opt.state_dict())
    assert fresh.state[params[0]]["buf"].dtype == torch.bfloat16


def test_restore_fp32_state_reads_the_saved_fp32_values_back_bitwise():
    params, opt = trained_bf16_optimizer()
    saved = opt.state_dict()
    fresh = Bare(params)
    fresh.load_state_dict(saved)
    multi_tensor.restore_fp32_state(fresh, saved)
    for index, p in enumerate(params):
        for key, value in saved["state"][index].items():
            loaded = fresh.state[p][key]
            assert loaded.dtype == value.dtype, (index, key)
            assert torch.equal(loaded, value), (index, key)
    assert fresh.state[params[0]][multi_tensor.MASTER].dtype == torch.float32


# --- sharded_order and stats -------------------------------------------------------------------------------


def test_sharded_order_without_a_shard_group_is_none_and_refuses_fsdp1_shards():
    params = parameters(torch.float32)
    assert multi_tensor.sharded_order(Bare(params), lambda group: True) is None
    flattened = parameters(torch.float32)
    setattr(flattened[0], UNSHARDED_SHAPE, torch.Size([8, 3]))  # an FSDP1 slice of an 8x3 weight
    with pytest.raises(UserError, match="shard_group"):
        multi_tensor.sharded_order(Bare(flattened), lambda group: True)


def test_sharded_order_with_a_shard_group_lists_every_chosen_groups_parameters_in_order():
    params = parameters(torch.float32)
    give_grads(params, seed=1, skip=(0,))  # a rank without a shard of params[0] still lists it
    opt = Bare(
        [
            {"params": params[:2], "keep": True},
            {"params": params[2:4], "keep": False},
            {"params": params[4:], "keep": True},
        ]
    )
    opt.shard_group = object()  # only its presence is read here
    order = multi_tensor.sharded_order(opt, lambda group: group["keep"])
    assert [id(p) for p in order] == [id(p) for p in params[:2] + params[4:]]


def test_stats_are_detached_fp32_vectors_with_the_names():
    w = torch.tensor([1.0, 2.0], dtype=torch.bfloat16, requires_grad=True) * 1
    g, ratio = torch.tensor([3.0, 4.0], dtype=torch.float64), torch.tensor([0.5, 0.25])
    out = multi_tensor.stats(["a", "b"], w, g, ratio)
    assert out["names"] == ["a", "b"]
    for key, source in (("w_norm", w), ("g_norm", g), ("trust_ratio", ratio)):
        assert out[key].dtype == torch.float32 and not out[key].requires_grad
        assert torch.equal(out[key], source.detach().to(torch.float32))
