"""The MLPerf/TPU sources' techniques against the sources' own code, re-written here as they run it.

Each oracle below is the source's computation transcribed (statefully, where the source keeps state), not a
call into our code: NVIDIA's MXNet ``PolySchedule`` driven by MXNet's ``num_update``; TF's
``poly_rate_schedule`` with ``tf.train.polynomial_decay``; Fujitsu's ``Explorer`` loop with MXNet's
``MultiFactorScheduler``; the FJSGD CUDA kernel in float64; TF's ``weight_decay * sum(tf.nn.l2_loss)``.
"""

from __future__ import annotations

import functools

import lightning as L
import pytest
import torch
from helpers import small_mlp
from lightning_lars.callbacks.techniques.weight_decay_schedule import WeightDecaySchedule
from torch import nn

from lightning_lars.optim.lars import LARS
from lightning_lars.optim.param_groups import param_groups
from lightning_lars.schedules.phases import EpochClock
from lightning_lars.schedules.source import FujitsuLR, FujitsuWeightDecay, MXNetPoly, TFLarsPoly
from lightning_lars.training.module import ImageClassifier
from tests.unit import callback_harness
from tests.unit.source_oracles import (
    FujitsuExplorerLoop,
    MXNetPolySchedule,
    N,
    mxnet_lrs,
    tf_poly_rate_schedule,
)


@pytest.mark.parametrize(
    "peak, spe, warmup_epochs, epochs, end",
    [
        (40.7, 22, 33, 90, 0.0),  # nvidia_mlperf06_60k: epoch = ceil(int(N / 1536) / 39)
        (10.5, 393, 2, 37, 1e-4),  # nvidia_mlperf10_3264: epoch = ceil(int(N / 8) / 408)
    ],
)
def test_mxnet_poly_is_nvidia_polyschedule_at_num_update(peak, spe, warmup_epochs, epochs, end):
    source = MXNetPolySchedule(peak, spe * epochs, spe * warmup_epochs, end, 2)
    expected = mxnet_lrs(source, spe * epochs)
    schedule = MXNetPoly.from_epochs(EpochClock(spe, epochs), peak, warmup_epochs=warmup_epochs, end_lr=end)
    ours = [schedule(step) for step in range(spe * epochs)]
    assert ours == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert ours[0] == pytest.approx(peak / (spe * warmup_epochs))  # the first update is already warm
    assert ours[-1] == pytest.approx(end, abs=1e-12)  # the last update reaches end_lr


@pytest.mark.parametrize(
    "plr, w_epochs, train_steps, batch",
    [
        (31.2, 25, 2983, 32768),  # Google MLPerf v0.6 tpu-v3-2048
        (24.699, 31, 1738, 65536),  # Google MLPerf v0.7 tpu-v3-8192
        (34.0, 12, 3558, 32768),  # tensorflow/tpu b13e6b6 at 32k (ying_tpu_32k)
    ],
)
def test_tf_lars_poly_is_poly_rate_schedule(plr, w_epochs, train_steps, batch):
    schedule = TFLarsPoly.from_epochs(
        EpochClock(N // batch, 0.0),
        plr,
        warmup_epochs=w_epochs,
        total_steps=train_steps,
        num_train_images=N,
        global_batch=batch,
    )
    for step in range(train_steps):
        expected = tf_poly_rate_schedule(
            step, plr=plr, w_epochs=w_epochs, train_steps=train_steps, batch_size=batch
        )
        assert schedule(step) == pytest.approx(expected, rel=1e-12, abs=1e-12), step


def test_fujitsu_lr_and_wd_coefficient_are_the_explorer_loop():
    loop = FujitsuExplorerLoop(13.0, 15, 36, 780, 0.0025, 2.2)
    lr_schedule = FujitsuLR.from_epochs(
        EpochClock(15, 90), 13.0, warmup_epochs=36, decay_steps=780, end_lr_ratio=0.0025, power=2.2
    )
    wd_schedule = FujitsuWeightDecay(warmup_steps=540, decay_steps=780, end_lr_ratio=0.0025, power=2.2)
    for step in range(15 * 90):
        lr, wd_coeff = loop.update()
        ours_lr, ours_wd = lr_schedule(step), wd_schedule(step)
        assert (ours_lr, ours_wd) == pytest.approx((lr, wd_coeff), rel=1e-12, abs=1e-15), step
    assert ours_lr == pytest.approx(0.0325)  # log lars_opt_end_learning_rate
    assert ours_wd == pytest.approx(539 / 540 * 0.0025)  # the ramp stops one step short of 1


def fjsgd_reference(weights, grads_per_step, lrs, wd_coeffs, *, adapted, wds, mu, eta):
    """MultiSGDLarsTwoStageKernel (Fujitsu mxnet_op.h) in float64, rescale_grad = world_size = 1, best_coeff = 1."""
    weights = [w.clone().double() for w in weights]
    momens = [torch.zeros_like(w) for w in weights]
    for grads, lr_base, c_wd in zip(grads_per_step, lrs, wd_coeffs):
        for i, (w, g) in enumerate(zip(weights, grads)):
            lr, wd = lr_base, wds[i]
            if adapted[i]:
                scale_factor = eta * w.norm() / (g.norm() + w.norm() * wd + 1e-9)
                if scale_factor > 0:
                    lr, wd = lr * scale_factor, wd * scale_factor
            momens[i] = mu * momens[i] - wd * w * c_wd - lr * g
            weights[i] = w + momens[i]
    return weights


def test_fujitsu_lars_form_is_the_fjsgd_kernel():
    model = small_mlp()
    generator = torch.Generator().manual_seed(1)
    grads_per_step = [
        [torch.randn(p.shape, generator=generator, dtype=torch.float64) for p in model.parameters()]
        for _ in range(5)
    ]
    grads_per_step[2][0].zero_()  # ||g|| = 0: the kernel still applies the ratio (eta / wd), > 0
    lrs, wd_coeffs = [0.5, 1.5, 3.0, 0.002, 2.0], [0.1, 0.5, 1.0, 0.99, 0.3]
    start = [p.detach().clone() for p in model.parameters()]
    wd = 6.5e-4
    groups = param_groups(model, wd, "ndim<=1")
    optimizer = LARS(
        groups, lr=lrs[0], momentum=0.96, weight_decay=wd, trust_coefficient=0.0025, eps=1e-9, form="fujitsu"
    )
    for grads, lr, c in zip(grads_per_step, lrs, wd_coeffs):
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        for group in optimizer.param_groups:
            group["lr"], group["wd_coefficient"] = lr, c
        optimizer.step()
        for p, g in zip(model.parameters(), grads):
            assert torch.equal(p.grad, g)  # p.grad is never changed
    adapted = [p.ndim > 1 for p in model.parameters()]
    expected = fjsgd_reference(
        start,
        grads_per_step,
        lrs,
        wd_coeffs,
        adapted=adapted,
        wds=[wd if a else 0.0 for a in adapted],
        mu=0.96,
        eta=0.0025,
    )
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.detach(), e, rtol=1e-12, atol=1e-14)


def test_l2_in_loss_is_tf_weight_decay_times_l2_loss_of_non_bn_variables():
    """resnet_main.py: loss = cross_entropy + wd * add_n([tf.nn.l2_loss(v) for non-BN v]), l2_loss = sum(v^2)/2."""
    torch.manual_seed(0)
    wd = 1e-2  # large, so the L2 gradient is well above rounding
    modules = {}
    for l2 in (0.0, wd):
        torch.manual_seed(0)
        module = ImageClassifier(
            "test_resnet", num_classes=3, optimizer=None, lr_schedule=lambda step: 0.0, l2_in_loss=l2
        )
        module.log = lambda *args, **kwargs: None  # no trainer here
        images, labels = (
            torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(2)),
            torch.tensor([0, 1, 2, 0]),
        )
        module.train()
        loss = module.training_step((images, labels), 0)
        loss.backward()
        modules[l2] = (module, loss)
    (plain, plain_loss), (with_l2, l2_loss) = modules[0.0], modules[wd]
    bn_params = {
        id(p) for m in with_l2.model.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()
    }
    tf_l2 = sum((p.detach() ** 2).sum() / 2 for p in with_l2.model.parameters() if id(p) not in bn_params)
    assert l2_loss.item() == pytest.approx(plain_loss.item() + wd * tf_l2.item(), rel=1e-6)
    for (name, p), q in zip(with_l2.model.named_parameters(), plain.model.parameters()):
        extra = p.grad - q.grad  # d/dw of wd * sum(w^2)/2 is wd * w; zero for BN gamma/beta
        expected = torch.zeros_like(p) if id(p) in bn_params else wd * p.detach()
        torch.testing.assert_close(extra, expected, rtol=1e-4, atol=1e-6, msg=name)
    assert with_l2.model.get_classifier().bias.grad is not None  # the FC bias is not BN: it is in the L2 term


def test_weight_decay_schedule_sets_fujitsus_coefficient_before_each_step_of_a_fit(tmp_path):
    """Explorer order: the coefficient for update s is computed before update s (current_iter = s)."""

    class Seen(L.Callback):
        def __init__(self):
            self.coefficients = []

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            self.coefficients.append(optimizer.param_groups[0]["wd_coefficient"])

    # as the recipe writes it: `_partial_: true` with every field bound
    schedule = functools.partial(
        FujitsuWeightDecay, warmup_steps=4, decay_steps=3, end_lr_ratio=0.0025, power=2.2
    )
    module = callback_harness.classifier("lars", weight_decay=6.5e-4)
    seen = Seen()
    callback_harness.trainer([WeightDecaySchedule(schedule), seen], tmp_path, max_epochs=1).fit(
        module, callback_harness.loader(callback_harness.images(48), batch_size=8)
    )
    expected = [c for _, c in FujitsuExplorerLoop(13.0, 1, 4, 3, 0.0025, 2.2).run(6)]
    assert seen.coefficients == pytest.approx(expected, rel=1e-12)
    assert expected[4:6] == pytest.approx([0.75, 0.75 * ((1 - 0.0025) * (2 / 3) ** 2.2 + 0.0025)])
