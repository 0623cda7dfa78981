"""The schedule objects themselves: values at their phase boundaries (Goyal et al.'s numbers, the poly formula
written out here), monotonic phases, frozen fields, and the phases every schedule exposes the same way."""

import dataclasses
import itertools

import pytest

from lightning_lars.core.errors import UserError
from lightning_lars.recipe.plan import check_command_line
from lightning_lars.schedules.batch_growth import BatchGrowth, GrownBatchSchedule
from lightning_lars.schedules.build import build_lr_schedule
from lightning_lars.schedules.lr import CaffePoly, Piecewise, WarmupPoly, WarmupStep
from lightning_lars.schedules.phases import EpochClock
from lightning_lars.schedules.rmsprop_blend import SgdFractionElu
from lightning_lars.schedules.source import FujitsuLR, FujitsuWeightDecay, MXNetPoly, TFLarsPoly

N = 1_281_167  # ImageNet-1k training images


def poly(step, *, peak, warmup, total, end, power):
    """Linear warmup from 0, then end + (peak - end) (1 - t)^power over [warmup, total] (You et al. 2017)."""
    if step < warmup:
        return peak * step / warmup
    t = min(1.0, (step - warmup) / (total - warmup))
    return end + (peak - end) * (1 - t) ** power


def every_schedule():
    """One of each LR schedule, as its conf/scheduler node builds it: 90 epochs of 100 steps."""
    clock = EpochClock(100, 90)
    return [
        WarmupPoly.from_epochs(clock, 8.0, warmup_epochs=5, end_lr=1e-4),
        WarmupPoly.from_steps(clock, 8.0, warmup_steps=450, total_steps=8800),
        WarmupPoly.linear(clock, 8.0, warmup_epochs=5),
        CaffePoly.from_epochs(clock, 8.0, warmup_epochs=5),
        WarmupStep.from_epochs(clock, 8.0, warmup_epochs=5, start_lr=0.1),
        Piecewise.from_epochs(
            clock, 8.0, boundaries=[40, 70, 85], multipliers=[0.5, 0.075, 0.01, 0.001], warmup_epochs=1
        ),
        MXNetPoly.from_epochs(clock, 8.0, warmup_epochs=5),
        TFLarsPoly.from_epochs(
            clock, 8.0, warmup_epochs=5, total_steps=9000, num_train_images=N, global_batch=N // 100
        ),
        FujitsuLR.from_epochs(clock, 8.0, warmup_epochs=5, decay_steps=7000, end_lr_ratio=0.0025, power=2.2),
    ]


def test_goyal_gradual_warmup_then_step_decay():
    # Goyal et al. 2017: 0.1 at step 0, 3.2 at the end of epoch 5, /10 after 30, 60, 80 (batch 8192).
    spe = N // 8192  # 156 steps per epoch
    lr = WarmupStep.from_epochs(
        EpochClock(spe, 90), 3.2, warmup_epochs=5, start_lr=0.1, milestones=[30, 60, 80]
    )
    assert lr(0) == pytest.approx(0.1)
    assert lr(5 * spe // 2) == pytest.approx(0.1 + (3.2 - 0.1) * (5 * spe // 2) / (5 * spe))
    assert lr(5 * spe) == pytest.approx(3.2)
    assert lr(30 * spe - 1) == pytest.approx(3.2)
    assert lr(30 * spe) == pytest.approx(0.32)
    assert lr(60 * spe) == pytest.approx(0.032)
    assert lr(80 * spe) == pytest.approx(0.0032)
    assert (lr.warmup_steps, lr.drop_steps, lr.decay_end_step) == (
        5 * spe,
        (30 * spe, 60 * spe, 80 * spe),
        90 * spe,
    )


def test_warmup_then_polynomial_decay():
    spe, epochs, warmup = 100, 10, 2
    lr = WarmupPoly.from_epochs(EpochClock(spe, epochs), 8.0, warmup_epochs=warmup, end_lr=1e-4, power=2.0)
    assert (lr.warmup_steps, lr.decay_end_step) == (200, 1000)
    for step in (0, 100, 199, 200, 201, 600, 999, 1000, 5000):  # past the end: stays at end_lr
        assert lr(step) == pytest.approx(
            poly(step, peak=8.0, warmup=200, total=1000, end=1e-4, power=2.0), rel=1e-12, abs=1e-15
        ), step


def test_poly_power_shapes_the_decay():
    clock = EpochClock(10, 10)
    assert WarmupPoly.from_epochs(clock, 1.0, warmup_epochs=0, power=1.0)(50) == pytest.approx(0.5)
    # Fujitsu's power
    assert WarmupPoly.from_epochs(clock, 1.0, warmup_epochs=0, power=2.2)(50) == pytest.approx(0.5**2.2)


def test_lamb_linear_schedule_in_steps_decays_to_zero_at_the_last_step():
    # fastalgo/imagenet_resnet50_lamb optimization.py: step * lr / warmup,
    # then (total - step) * lr / (total - warmup)
    lr = WarmupPoly.linear(EpochClock(39, 90), 0.04, warmup_steps=782, total_steps=3519)
    for step in (0, 391, 782, 2000, 3518, 3519):
        expected = step * 0.04 / 782 if step <= 782 else (3519 - step) * 0.04 / (3519 - 782)
        assert lr(step) == pytest.approx(expected, rel=1e-12, abs=1e-15), step


def test_a_toy_run_shorter_than_its_warmup_still_decays_one_step():
    lr = WarmupPoly.from_epochs(EpochClock(10, 1), 1.0, warmup_epochs=5)
    assert (lr.warmup_steps, lr.decay_end_step) == (50, 51)


@pytest.mark.parametrize("schedule", every_schedule(), ids=lambda s: type(s).__name__)
def test_every_schedule_exposes_its_phases_in_steps(schedule):
    assert isinstance(schedule.warmup_steps, int) and isinstance(schedule.decay_end_step, int)
    assert 0 < schedule.warmup_steps < schedule.decay_end_step
    assert all(isinstance(step, int) for step in schedule.drop_steps)
    assert schedule.steps_per_epoch == 100 and schedule.peak_lr == 8.0


@pytest.mark.parametrize("schedule", every_schedule(), ids=lambda s: type(s).__name__)
def test_warmup_rises_and_the_decay_never_rises(schedule):
    warmup = [schedule(step) for step in range(schedule.warmup_steps)]
    assert all(a < b for a, b in itertools.pairwise(warmup))
    decay = [schedule(step) for step in range(schedule.warmup_steps, 9000)]
    assert all(a >= b for a, b in itertools.pairwise(decay))
    assert min(decay) >= 0


@pytest.mark.parametrize("schedule", every_schedule(), ids=lambda s: type(s).__name__)
def test_schedules_are_frozen_values(schedule):
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.peak_lr = 1.0
    assert schedule == dataclasses.replace(schedule) and hash(schedule) == hash(dataclasses.replace(schedule))


def test_drops_land_on_the_boundary_steps():
    lr = Piecewise.from_epochs(
        EpochClock(39, 90), 12.8, boundaries=[40, 70, 85], multipliers=[0.5, 0.075, 0.01, 0.001]
    )
    assert lr.drop_steps == (40 * 39, 70 * 39, 85 * 39)
    for drop, before, after in zip(lr.drop_steps, [0.5, 0.075, 0.01], [0.075, 0.01, 0.001]):
        assert (lr(drop - 1), lr(drop)) == (pytest.approx(12.8 * before), pytest.approx(12.8 * after))


def test_bad_shapes_are_one_line_errors():
    with pytest.raises(UserError, match="multipliers"):
        Piecewise.from_epochs(EpochClock(10, 9), 1.0, boundaries=[3, 6], multipliers=[1.0, 0.1])
    with pytest.raises(UserError, match="warmup"):
        WarmupPoly.from_steps(EpochClock(10, 9), 1.0, warmup_steps=90, total_steps=90)


def test_batch_growth_reads_the_base_schedule_at_the_same_epoch():
    # Mikami et al.: batch x2 from epoch 5; an epoch of the grown batch has spe // 2 steps of twice the images
    spe = 39
    growth = BatchGrowth.from_table(spe, {5: 2})
    assert [growth.steps_in_epoch(e) for e in (0, 4, 5, 89)] == [39, 39, 19, 19]
    assert growth.at(5 * spe - 1) == (5 * spe - 1, 1) and growth.at(5 * spe) == (5 * spe, 2)
    assert growth.at(5 * spe + 19) == (6 * spe, 2)  # the grown epoch's last image pair is trimmed
    base = WarmupPoly.from_epochs(EpochClock(spe, 90), 8.0, warmup_epochs=5, end_lr=1e-4)
    grown = GrownBatchSchedule(base=base, growth=growth, scale_lr=True)
    assert grown(5 * spe + 3) == pytest.approx(2 * base(5 * spe + 6))
    assert (grown.warmup_steps, grown.decay_end_step) == (5 * spe, 5 * spe + 85 * 19)
    assert (grown.peak_lr, grown.steps_per_epoch) == (8.0, spe)


def test_rmsprop_blend_follows_akiba_et_al():
    # alpha_SGD = 0.5 exp(2 (e - c) / p) below c, 0.5 + (e - c) / p up to c + p / 2, then 1 (c = 10, p = 5)
    blend = SgdFractionElu(steps_per_epoch=100)
    assert blend(0) == pytest.approx(0.5 * 2.718281828459045**-4)
    assert blend(1000) == pytest.approx(0.5) and blend(1100) == pytest.approx(0.7)
    assert blend(1249) < 1.0 == blend(1250) == blend(9000)


def test_fujitsu_weight_decay_ramp_stops_one_step_short():
    coefficient = FujitsuWeightDecay(warmup_steps=540, decay_steps=780, end_lr_ratio=0.0025, power=2.2)
    assert coefficient(0) == 0.0 and coefficient(539) == pytest.approx(539 / 540)
    assert coefficient.decay_end_step == 1320 and coefficient(1320) == pytest.approx(539 / 540 * 0.0025)


def test_the_builder_scales_the_lr_and_converts_epochs():
    # Goyal et al. sec. 2.1: 0.1 per 256 images -> 3.2 at 8192; 5 warmup epochs of 156 steps
    schedule = build_lr_schedule(
        {
            "_target_": "lightning_lars.schedules.lr.WarmupStep.from_epochs",
            "_partial_": True,
            "base_lr": 0.1,
            "base_batch": 256,
            "warmup_epochs": 5,
            "milestones": [30, 60, 80],
        },
        8192,
        156,
        90.0,
    )
    assert isinstance(schedule, WarmupStep) and schedule.peak_lr == pytest.approx(3.2)
    assert (schedule.warmup_steps, schedule.drop_steps, schedule.decay_end_step) == (
        780,
        (4680, 9360, 12480),
        14040,
    )


def test_a_key_the_schedule_does_not_take_is_one_line_at_composition():
    with pytest.raises(UserError) as raised:
        check_command_line(["recipe=demo", "+scheduler.warmup_step=3"])  # warmup_epochs misspelt
    # the schedule's schema lists what it reads, the misspelt key's fix among them
    message = str(raised.value)
    assert message.startswith("unknown config key 'scheduler.warmup_step': nothing reads it; remove it")
    assert "warmup_epochs" in message.partition("(its keys: ")[2] and "\n" not in message
