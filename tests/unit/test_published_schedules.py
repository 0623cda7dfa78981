"""Each recipe's LR, weight decay, momentum and batch at named steps equal its published schedule.

Expected values are computed here from the papers' numbers (each row cites its source), not read back from the recipes
(the MLPerf, TPU and Fujitsu recipes are checked against their sources in test_golden_mlperf.py):
N = 1,281,167 ImageNet training images, steps per epoch = N // global batch (drop-last).
"""

import pytest
import torch

from lightning_lars.schedules.batch_growth import BatchGrowth
from lightning_lars.schedules.rmsprop_blend import SgdFractionElu
from tests.unit.recipe_helpers import build_optimizer, build_schedule, recipe

N = 1_281_167


def poly(step, *, peak, warmup, total, end, power, start=0.0):
    """Linear warmup from `start`, then polynomial decay to `end` (written out independently)."""
    if step < warmup:
        return start + (peak - start) * step / warmup
    t = min(1.0, (step - warmup) / (total - warmup))
    return end + (peak - end) * (1 - t) ** power


def hyper(name):
    """(lr schedule, steps/epoch, first group's momentum and weight decay, nesterov, global batch)."""
    cfg = recipe(name)
    schedule, _, spe = build_schedule(cfg)
    group = build_optimizer(cfg).param_groups[0]
    return schedule, spe, group, cfg


def test_goyal_8k():
    lr, spe, group, cfg = hyper("goyal_8k")
    assert spe == N // 8192 and cfg.batch.global_size == 8192
    assert lr(0) == pytest.approx(0.1)  # gradual warmup starts at 0.1
    assert lr(5 * spe) == pytest.approx(0.1 * 8192 / 256)  # 3.2 at the end of epoch 5
    assert lr(30 * spe - 1) == pytest.approx(3.2)
    assert lr(30 * spe) == pytest.approx(0.32)  # /10 after epoch 30
    assert lr(60 * spe) == pytest.approx(0.032) and lr(80 * spe) == pytest.approx(0.0032)
    assert (group["momentum"], group["weight_decay"], group["nesterov"]) == (0.9, 1e-4, True)


@pytest.mark.parametrize(
    "name, batch, peak, warmup_epochs, epochs, end, power, momentum, wd",
    [
        ("jia_64k", 65536, 24.699, 31, 90, 1e-4, 2.0, 0.9, 1e-4),
    ],
)
def test_warmup_poly_runs_in_epochs(name, batch, peak, warmup_epochs, epochs, end, power, momentum, wd):
    lr, spe, group, cfg = hyper(name)
    assert cfg.batch.global_size == batch and spe == N // batch
    expected = lambda step: poly(
        step, peak=peak, warmup=warmup_epochs * spe, total=epochs * spe, end=end, power=power
    )
    for step in (
        0,
        warmup_epochs * spe // 2,
        warmup_epochs * spe,
        (warmup_epochs + epochs) * spe // 2,
        epochs * spe - 1,
        epochs * spe,
    ):
        assert lr(step) == pytest.approx(expected(step), rel=1e-9, abs=1e-12), (name, step)
    assert lr(warmup_epochs * spe) == pytest.approx(peak)
    assert (group["momentum"], group["weight_decay"]) == (momentum, wd)


@pytest.mark.parametrize(
    "name, batch, peak, warmup_steps, total_steps, end, power, momentum, wd",
    [
        # warmup steps = int(epochs x N / batch), as TF computes them. nado_nesterov_32k is piecewise (the MLPerf
        # v0.7 JAX code's --nolars branch): tests/unit/test_golden_papers.py checks it against that code
        ("lamb_32k", 32768, 0.04, 782, 3519, 0.0, 1.0, None, 1.5),
    ],
)
def test_runs_published_in_steps(name, batch, peak, warmup_steps, total_steps, end, power, momentum, wd):
    lr, _, group, cfg = hyper(name)
    assert cfg.batch.global_size == batch and cfg.trainer.max_steps == total_steps
    for step in (0, warmup_steps // 2, warmup_steps, (warmup_steps + total_steps) // 2, total_steps):
        expected = poly(step, peak=peak, warmup=warmup_steps, total=total_steps, end=end, power=power)
        assert lr(step) == pytest.approx(expected, rel=1e-9, abs=1e-12), (name, step)
    assert group["weight_decay"] == wd
    if momentum is not None:
        assert group["momentum"] == momentum
    else:
        assert tuple(group["betas"]) == (0.9, 0.999) and group["eps"] == 1e-6


def test_lamb_and_mlperf_trainers_stop_where_the_schedule_ends():
    for name in ("google_mlperf06_32k", "google_mlperf07_64k", "nado_nesterov_32k", "lamb_32k"):
        cfg = recipe(name)
        assert cfg.trainer.max_steps <= cfg.trainer.max_epochs * (N // cfg.batch.global_size), name


def test_akiba_slow_start_and_rmsprop_warmup():
    lr, spe, group, cfg = hyper("akiba_32k")
    base = 0.1 * 32768 / 256  # 12.8
    assert lr(0) == pytest.approx(0.5 * base) and lr(40 * spe - 1) == pytest.approx(0.5 * base)
    assert lr(40 * spe) == pytest.approx(0.075 * base)
    assert lr(70 * spe) == pytest.approx(0.01 * base) and lr(85 * spe) == pytest.approx(0.001 * base)
    # alpha_SGD: ELU-shaped, beta_c = 10, beta_p = 5 epochs; 1/2 at the centre, 1 from 12.5 epochs on
    blend = cfg.callbacks.rmsprop_warmup
    elu = SgdFractionElu(
        steps_per_epoch=spe, center_epochs=blend.center_epochs, period_epochs=blend.period_epochs
    )
    fraction = lambda epoch: elu(round(epoch * spe))
    assert fraction(0) == pytest.approx(0.5 * torch.exp(torch.tensor(-4.0)).item())
    assert fraction(10) == pytest.approx(0.5)
    assert fraction(11) == pytest.approx(0.5 + 1 / 5, rel=1e-3)
    assert fraction(12.5) == 1.0 and fraction(60) == 1.0
    assert group["momentum"] == 0.9 and cfg.batch.bn_group == 32


def test_mikami_batch_grows_after_five_epochs_and_lr_is_not_rescaled():
    lr, spe, group, cfg = hyper("mikami_68k")
    growth = dict(cfg.callbacks.batch_size_control.growth)
    assert cfg.batch.global_size == 34816 and 34816 * growth[5] == 69632
    peak = 31.2 * 34816 / 32768
    assert lr(5 * spe) == pytest.approx(peak)  # warmup over the first 5 epochs at the small batch
    # after the growth an epoch has spe // 2 steps; position in small-batch steps advances 2 per step
    step_after = 5 * spe + 10
    base_step, factor = BatchGrowth.from_table(spe, growth).at(step_after)
    assert (base_step, factor) == (5 * spe + 20, 2)
    assert lr(base_step) == pytest.approx(
        poly(base_step, peak=peak, warmup=5 * spe, total=90 * spe, end=1e-4, power=2.0)
    )
