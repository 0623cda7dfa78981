"""LARS and LAMB under AMP's loss scaler (``optim.loss_scale``), against torch's real ``GradScaler('cpu')`` and
its fused SGD and AdamW (CPU kernels in torch >= 2.4), which take the scale in the step as ours now do.

Reduced to their plain counterparts (no trust ratio; LARS's "nvidia" form is SGD with momentum, LAMB without
clipping is AdamW), ours must follow the fused optimizers step for step through finite and inf gradients. With
trust ratios on, the scaled path must equal the unscaled one on the gradients unscaled beforehand. A step with
``found_inf`` must change nothing, and ``GradScaler.step`` must read nothing back to the host."""

from __future__ import annotations

import functools
import io

import lightning as L
import pytest
import torch
from lightning.fabric.plugins.precision.amp import _optimizer_handles_unscaling
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from lightning_lars.optim.lamb import LAMB
from lightning_lars.optim.lars import LARS
from lightning_lars.optim.param_groups import param_groups
from lightning_lars.parallel.sharded_update import ShardedUpdate
from lightning_lars.training.module import ImageClassifier

INF_STEPS = (1, 4)  # an inf gradient at these steps: the scaler skips them and halves its scale


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def _plain(model, wd):
    """One group without trust ratios: what torch's SGD and AdamW do to every tensor."""
    return [{"params": list(model.parameters()), "trust_adaptation": False, "weight_decay": wd}]


def _train_under_scaler(make, steps: int = 7):
    """Parameters and the scaler's scale after each step, inf gradients injected at INF_STEPS."""
    model = _model()
    optimizer = make(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=3)
    data = torch.randn(steps, 8, 6, generator=torch.Generator().manual_seed(1))
    history = []
    for step in range(steps):
        loss = model(data[step]).square().mean()
        scaler.scale(loss).backward()
        if step in INF_STEPS:
            next(model.parameters()).grad[0, 0] = float("inf")
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        history.append(([p.detach().clone() for p in model.parameters()], scaler.get_scale()))
    return history, optimizer


def _assert_same_history(ours, theirs, rtol):
    for step, ((ours_params, ours_scale), (their_params, their_scale)) in enumerate(zip(ours, theirs)):
        assert ours_scale == their_scale, step
        for a, b in zip(ours_params, their_params):
            torch.testing.assert_close(a, b, rtol=rtol, atol=1e-7, msg=f"step {step}")


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_without_trust_ratios_follows_torchs_fused_sgd_under_a_grad_scaler(nesterov):
    options = {"lr": 0.1, "momentum": 0.9, "nesterov": nesterov}
    theirs, _ = _train_under_scaler(
        lambda m: torch.optim.SGD(m.parameters(), weight_decay=1e-2, fused=True, **options)
    )
    ours, _ = _train_under_scaler(lambda m: LARS(_plain(m, 1e-2), form="nvidia", **options))
    before_first_inf = theirs[INF_STEPS[0] - 1][0]
    assert all(torch.equal(a, b) for a, b in zip(theirs[INF_STEPS[0]][0], before_first_inf))  # torch skipped
    _assert_same_history(ours, theirs, rtol=1e-6)


def test_lamb_without_trust_ratios_or_clipping_follows_torchs_fused_adamw_and_counts_only_taken_steps():
    options = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 1e-2}
    theirs, adamw = _train_under_scaler(lambda m: torch.optim.AdamW(m.parameters(), fused=True, **options))
    ours, lamb = _train_under_scaler(
        lambda m: LAMB(_plain(m, options["weight_decay"]), max_grad_norm=None, **options)
    )
    _assert_same_history(ours, theirs, rtol=1e-5)
    their_steps = {float(s["step"]) for s in adamw.state.values()}
    assert their_steps == {7.0 - len(INF_STEPS)}
    assert float(lamb.param_groups[0]["step"]) == 7.0 - len(INF_STEPS)


def _scaled_step(optimizer, scale: float, found_inf: float) -> None:
    """What ``GradScaler.step`` does for an optimizer with ``_step_supports_amp_scaling``."""
    optimizer.grad_scale = torch.tensor(scale)
    optimizer.found_inf = torch.tensor(found_inf)
    optimizer.step()
    del optimizer.grad_scale, optimizer.found_inf


OPTIMIZERS = {
    "lars mlperf": lambda m: LARS(param_groups(m, 1e-2), lr=0.5, trust_coefficient=0.02),
    "lars nvidia nesterov clip": lambda m: LARS(
        param_groups(m, 1e-2), lr=0.5, form="nvidia", nesterov=True, clip=True, trust_coefficient=0.02
    ),
    "lars fujitsu": lambda m: LARS(param_groups(m, 1e-2), lr=0.5, form="fujitsu", trust_coefficient=0.02),
    "lamb": lambda m: LAMB(param_groups(m, 1e-2), lr=1e-2),
}


# LAMB's scaled path takes its bias corrections on the device in fp32 (the unscaled one on the host in fp64) and
# m as b1 m + (1 - b1) g instead of a lerp: a few ulps apart
RTOL = {"lamb": 1e-5}


def _state(optimizer) -> list[torch.Tensor]:
    tensors = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return tensors + [torch.as_tensor(float(g.get("step", 0))) for g in optimizer.param_groups]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_with_trust_ratios_the_scaled_step_equals_the_step_on_gradients_unscaled_beforehand(name):
    scale = 2.0**14
    scaled_model, plain_model = _model(), _model()
    scaled, plain = OPTIMIZERS[name](scaled_model), OPTIMIZERS[name](plain_model)
    generator = torch.Generator().manual_seed(2)
    for _ in range(4):
        grads = [torch.randn(p.shape, generator=generator) for p in plain_model.parameters()]
        for p, q, g in zip(scaled_model.parameters(), plain_model.parameters(), grads):
            p.grad, q.grad = g * scale, g.clone()
        _scaled_step(scaled, scale, 0.0)
        plain.step()
        assert all(torch.equal(p.grad, g * scale) for p, g in zip(scaled_model.parameters(), grads))
        for a, b in zip(scaled_model.parameters(), plain_model.parameters()):
            torch.testing.assert_close(a, b, rtol=RTOL.get(name, 1e-6), atol=0)
    for a, b in zip(_state(scaled), _state(plain)):
        torch.testing.assert_close(a, b, rtol=RTOL.get(name, 1e-6), atol=0)


@pytest.mark.parametrize("first", [True, False], ids=["first step", "later step"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_step_with_found_inf_leaves_weights_state_and_step_count_exactly_as_they_were(name, first):
    model = _model()
    optimizer = OPTIMIZERS[name](model)
    generator = torch.Generator().manual_seed(3)
    if not first:
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=generator) * 8.0
        _scaled_step(optimizer, 8.0, 0.0)
    weights, state = [p.detach().clone() for p in model.parameters()], [t.clone() for t in _state(optimizer)]
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=generator)
    next(model.parameters()).grad[0, 0] = float("nan")
    _scaled_step(optimizer, 8.0, 1.0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights))
    after = _state(optimizer)
    if first:  # the state the step created is its zeros
        assert all(not t.any() for t in after[: len(after) - len(optimizer.param_groups)])
    else:
        assert all(torch.equal(a, b) for a, b in zip(after, state))
    assert all(float(g.get("step", 0)) == (0 if first else 1) for g in optimizer.param_groups if "step" in g)


class _HostReads(TorchDispatchMode):
    """Counts ``.item()``-style reads (``aten._local_scalar_dense``): the call that waits for a GPU."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


def _host_reads_per_scaler_step(model, optimizer) -> list[int]:
    """Host read-backs inside ``GradScaler.step`` on a finite step, then on a step with an inf gradient."""
    scaler = torch.amp.GradScaler("cpu")
    counts = []
    for step in range(2):
        scaler.scale(model(torch.randn(4, 6)).square().mean()).backward()
        if step == 1:
            next(model.parameters()).grad[0, 0] = float("inf")
        with _HostReads() as probe:
            scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        counts.append(probe.count)
    return counts


@pytest.mark.parametrize(
    "name, make, reads",
    [
        ("torch SGD, per-tensor loop", lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), 1),
        ("torch SGD, fused", lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, fused=True), 0),
        *[(name, make, 0) for name, make in OPTIMIZERS.items()],
    ],
)
def test_grad_scaler_step_reads_found_inf_back_only_for_optimizers_without_amp_support(name, make, reads):
    model = _model()
    optimizer = make(model)
    assert _host_reads_per_scaler_step(model, optimizer) == [reads, reads], name
    # Lightning's MixedPrecision plugin reads the same flag: it leaves unscale_ to the optimizer
    assert _optimizer_handles_unscaling(optimizer) == (reads == 0)


class _Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = _model()
        self.reads_in_scaler_step: list[int] = []

    def training_step(self, batch, batch_index):
        return self.net(batch[0]).square().mean()

    def configure_optimizers(self):
        return LARS(param_groups(self.net, 1e-2), lr=0.1)


def test_lightnings_mixed_precision_plugin_hands_the_scale_to_lars_without_a_host_read():
    """Lightning's own MixedPrecision plugin with a real CPU GradScaler (Lightning makes none on a CPU): its
    optimizer_step leaves unscale_ to LARS and calls scaler.step, which then reads nothing back."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    module = _Tiny()
    original_step = scaler.step

    def counted_step(optimizer, *args, **kwargs):
        with _HostReads() as probe:
            result = original_step(optimizer, *args, **kwargs)
        module.reads_in_scaler_step.append(probe.count)
        return result

    scaler.step = counted_step
    trainer = L.Trainer(
        accelerator="cpu",
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = torch.utils.data.TensorDataset(torch.randn(24, 6, generator=torch.Generator().manual_seed(4)))
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    assert module.reads_in_scaler_step == [0, 0, 0]


@pytest.mark.parametrize("clip", [None, 1.0])
def test_with_gradient_clipping_the_module_leaves_unscaling_to_the_scaler_as_lightning_requires(clip):
    module = ImageClassifier("resnet18", 10, functools.partial(LARS, momentum=0.9), lambda step: 0.1)
    module.trainer = L.Trainer(accelerator="cpu", gradient_clip_val=clip, logger=False)
    optimizer = module.configure_optimizers()
    assert _optimizer_handles_unscaling(optimizer) == (clip is None)


def test_a_lamb_checkpoint_from_a_scaled_run_resumes_without_a_scaler_as_the_run_itself_continues():
    """Under a scaler LAMB counts t on the device (``group["step"]`` a 0-d tensor); a checkpoint of it, saved and
    loaded through bytes as Lightning does, continues an unscaled run exactly as the original optimizer does."""
    model, resumed_model = _model(), _model()
    optimizer = OPTIMIZERS["lamb"](model)
    generator = torch.Generator().manual_seed(5)
    for _ in range(2):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=generator) * 64.0
        _scaled_step(optimizer, 64.0, 0.0)
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    resumed_model.load_state_dict(model.state_dict())
    resumed = OPTIMIZERS["lamb"](resumed_model)
    resumed.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    grads = [torch.randn(p.shape, generator=generator) for p in model.parameters()]
    for p, q, g in zip(model.parameters(), resumed_model.parameters(), grads):
        p.grad, q.grad = g.clone(), g.clone()
    optimizer.step()
    resumed.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), resumed_model.parameters()))
    assert [g["step"] for g in resumed.param_groups] == [3] * len(resumed.param_groups)


@pytest.mark.parametrize(
    "make",
    [
        lambda m, impl: LARS(
            param_groups(m, 1e-2), lr=0.5, form="nvidia", trust_coefficient=0.02, implementation=impl
        ),
        lambda m, impl: LAMB(param_groups(m, 1e-2), lr=1e-2, implementation=impl),
    ],
    ids=["lars", "lamb"],
)
def test_the_compiled_step_takes_the_scale_and_skips_as_the_eager_one(make):
    compiled_model, eager_model = _model(), _model()
    compiled, eager = make(compiled_model, "compiled"), make(eager_model, "eager")
    generator = torch.Generator().manual_seed(6)
    for found_inf in (0.0, 0.0, 1.0, 0.0):
        before = [p.detach().clone() for p in compiled_model.parameters()]
        grads = [torch.randn(p.shape, generator=generator) * 32.0 for p in eager_model.parameters()]
        if found_inf:
            grads[0][0, 0] = float("inf")
        for p, q, g in zip(compiled_model.parameters(), eager_model.parameters(), grads):
            p.grad, q.grad = g.clone(), g.clone()
        _scaled_step(compiled, 32.0, found_inf)
        _scaled_step(eager, 32.0, found_inf)
        if found_inf:
            assert all(torch.equal(p, b) for p, b in zip(compiled_model.parameters(), before))
        for p, q in zip(compiled_model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)
    assert compiled.implementation == "compiled"  # it did not fall back to eager


@pytest.fixture
def one_process_group(tmp_path):
    """A real gloo group of one process: what ShardedUpdate needs to be built (it owns every tensor then)."""
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield ShardedUpdate
    finally:
        torch.distributed.destroy_process_group()


def test_sharded_update_takes_the_scale_as_the_optimizer_it_wraps_and_follows_torchs_fused_sgd(
    one_process_group,
):
    """The scaler sets grad_scale/found_inf on the wrapper; dropped there, LARS would step on scaled gradients
    and through inf ones. The oracle is torch's fused SGD under the same GradScaler, skips included."""
    sharded = one_process_group
    options = {"lr": 0.1, "momentum": 0.9}
    theirs, _ = _train_under_scaler(
        lambda m: torch.optim.SGD(m.parameters(), weight_decay=1e-2, fused=True, **options)
    )
    ours, wrapper = _train_under_scaler(lambda m: sharded(LARS(_plain(m, 1e-2), form="nvidia", **options)))
    assert wrapper._step_supports_amp_scaling and _optimizer_handles_unscaling(wrapper)
    _assert_same_history(ours, theirs, rtol=1e-6)
    assert not hasattr(wrapper.inner, "grad_scale")  # handed over for the step only


def test_sharded_lamb_clips_by_the_unscaled_gradient_norm_as_unsharded_lamb_does(one_process_group):
    """LAMB's global clip (active: max_grad_norm far below ||G||) is taken by the wrapper; under the scaler it
    must divide ||G|| by the scale, or every clipped step shrinks by the scale (2^12 here)."""
    sharded = one_process_group
    make = lambda m: LAMB(param_groups(m, 1e-2), lr=1e-2, max_grad_norm=1e-3)  # noqa: E731
    theirs, _ = _train_under_scaler(make)
    ours, _ = _train_under_scaler(lambda m: sharded(make(m)))
    _assert_same_history(ours, theirs, rtol=0)


def test_grad_scaler_step_reads_nothing_back_through_sharded_update(one_process_group):
    model = _model()
    assert _host_reads_per_scaler_step(model, one_process_group(OPTIMIZERS["lars mlperf"](model))) == [0, 0]
