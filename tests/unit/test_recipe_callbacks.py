"""The techniques' callbacks and RMSprop warm-up inside real Lightning fits (tests/unit/callback_harness.py)."""

import functools

import pytest
import torch
from lightning_lars.callbacks.techniques.batch_norm import BatchNormGroups, BatchNormWithoutMovingAverage
from lightning_lars.callbacks.techniques.batch_size_control import BatchSizeControl
from lightning_lars.callbacks.techniques.rmsprop_warmup import RMSpropWarmupBlend
from lightning_lars.callbacks.techniques.schedule import ScheduleCallback
from lightning_lars.callbacks.techniques.weight_decay_follows_lr import WeightDecayFollowsLR

from lightning_lars.core.errors import UserError
from lightning_lars.models.batch_norm import GroupBatchNorm, batch_norms
from lightning_lars.optim.rmsprop_warmup import RMSpropWarmup
from lightning_lars.schedules.lr import WarmupPoly
from lightning_lars.schedules.phases import EpochClock
from lightning_lars.schedules.scaling import plan_batch
from tests.unit import callback_harness


def schedule(steps_per_epoch, epochs=4, peak=0.05):
    clock = EpochClock(steps_per_epoch, epochs)
    return WarmupPoly.from_epochs(clock, peak, warmup_epochs=1, end_lr=0.0, power=2.0)


class StepRecorder(ScheduleCallback):
    """The real schedule callback, also recording (epoch, micro-batches per step, lr) at each optimizer step."""

    def __init__(self):
        self.steps, self.micro = [], 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.micro += 1
        if trainer.global_step > len(self.steps):
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            self.steps.append((trainer.current_epoch, self.micro, lr, trainer.optimizers[0].param_groups[0]))
            self.micro = 0


def test_batch_size_control_doubles_the_batch_exactly(tmp_path):
    # 40 images, micro-batch 4: 10 micro-batches per epoch; recipe batch 8 (accumulation 2) -> 5 steps/epoch
    spe = 40 // 8
    module = callback_harness.classifier("sgd", lr_schedule=schedule(spe))
    recorder = StepRecorder()
    control = BatchSizeControl(growth={1: 2}, scale_lr=True)
    trainer = callback_harness.trainer([control, recorder], tmp_path, max_epochs=3, accumulate_grad_batches=2)
    trainer.fit(
        module,
        callback_harness.loader(callback_harness.images(40), batch_size=4),
        callback_harness.loader(callback_harness.images(8), 4),
    )
    per_epoch = [sum(1 for s in recorder.steps if s[0] == e) for e in range(3)]
    assert per_epoch == [5, 2, 2]  # after the growth: 5 // 2 whole steps of 16 images, the rest trimmed
    assert [s[1] for s in recorder.steps] == [2] * 5 + [4] * 4  # micro-batches behind every step
    base = schedule(spe)
    # step 5 (first of epoch 1) stands at base step 5 with factor 2; the next at base step 7
    assert recorder.steps[5][2] == pytest.approx(2 * base(5))
    assert recorder.steps[6][2] == pytest.approx(2 * base(7))
    assert "val/top1" in trainer.callback_metrics  # validation still ran at the trimmed epoch ends


def test_weight_decay_follows_lr_in_a_fit(tmp_path):
    module = callback_harness.classifier("lars", weight_decay=1e-3, lr_schedule=schedule(5))
    recorder = StepRecorder()
    callback_harness.trainer([WeightDecayFollowsLR(), recorder], tmp_path, max_epochs=1).fit(
        module, callback_harness.loader(callback_harness.images(40), batch_size=8)
    )
    for _, _, lr, group in recorder.steps[-1:]:
        assert group["initial_weight_decay"] == 1e-3
        assert group["weight_decay"] == pytest.approx(1e-3 * lr / 0.05)


def test_rmsprop_warmup_step_by_hand():
    torch.manual_seed(0)
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    w0 = w.detach().clone()
    optimizer = RMSpropWarmup(
        [{"params": [w], "weight_decay": 0.01, "trust_adaptation": False}],
        lr=0.5,
        rmsprop_lr=0.01,
        momentum=0.9,
        alpha=0.99,
        eps=1e-8,
    )
    grads = [torch.randn(5, 3, dtype=torch.float64) for _ in range(3)]
    m, b, ref = torch.zeros_like(w0), torch.zeros_like(w0), w0.clone()
    for step, g in enumerate(grads):
        a = [0.1, 0.6, 1.0][step]
        optimizer.param_groups[0]["sgd_fraction"] = a
        w.grad = g.clone()
        optimizer.step()
        d = g + 0.01 * ref
        m = 0.99 * m + 0.01 * d * d
        b = 0.9 * b + 0.5 * a * d + 0.01 * (1 - a) * d / (m.sqrt() + 1e-8)
        ref = ref - b
        torch.testing.assert_close(w.detach(), ref)
        torch.testing.assert_close(w.grad, g)  # the gradient is left untouched


def test_rmsprop_warmup_refuses_to_run_without_its_blend():
    w = torch.nn.Parameter(torch.randn(3))
    w.grad = torch.randn(3)
    with pytest.raises(UserError, match="callbacks.rmsprop_warmup"):
        RMSpropWarmup([w]).step()


def test_rmsprop_blend_callback_sets_the_elu_fraction(tmp_path):
    module = callback_harness.classifier("sgd", lr_schedule=schedule(5))
    module.optimizer_factory = functools.partial(RMSpropWarmup, weight_decay=1e-4)
    recorder = StepRecorder()
    callback_harness.trainer(
        [RMSpropWarmupBlend(center_epochs=0.5, period_epochs=1.0), recorder], tmp_path, max_epochs=1
    ).fit(module, callback_harness.loader(callback_harness.images(40), batch_size=8))
    group = recorder.steps[-1][3]
    epoch = 4 / 5  # the last of 5 steps in an epoch of 5
    assert group["sgd_fraction"] == pytest.approx(0.5 + (epoch - 0.5) / 1.0)  # Akiba et al.: 0.5 + (e - c)/p


def test_bn_groups_callback_converts_to_ghost_bn_in_a_fit(tmp_path):
    module = callback_harness.classifier("sgd")
    plan = plan_batch(8, 1, 1, 8, bn_group=4)
    callback = BatchNormGroups(plan)
    callback_harness.trainer([callback], tmp_path, max_epochs=1).fit(
        module, callback_harness.loader(callback_harness.images(16), batch_size=8)
    )
    bns = batch_norms(module)
    assert callback.converted == len(bns) > 0
    assert all(isinstance(bn, GroupBatchNorm) and bn.group_size == 4 for _, bn in bns)


def test_bn_without_moving_average_in_a_fit(tmp_path):
    module = callback_harness.classifier("sgd")
    callback_harness.trainer([BatchNormWithoutMovingAverage()], tmp_path, max_epochs=1).fit(
        module,
        callback_harness.loader(callback_harness.images(16), batch_size=8),
        callback_harness.loader(callback_harness.images(8), batch_size=8),
    )
    assert all(bn.momentum == 1.0 for _, bn in batch_norms(module))
