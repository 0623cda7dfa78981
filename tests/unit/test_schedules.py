import pytest

from lightning_lars.schedules.lr import warmup_poly, warmup_step


def test_goyal_gradual_warmup_then_step_decay():
    # Goyal et al. 2017: 0.1 at step 0, 3.2 at the end of epoch 5, /10 after 30, 60, 80 (batch 8192).
    spe = 1_281_167 // 8192  # 156 steps per epoch
    lr = lambda step: warmup_step(step, peak_lr=3.2, steps_per_epoch=spe, total_epochs=90, warmup_epochs=5,
                                  start_lr=0.1, milestones=[30, 60, 80], gamma=0.1)
    assert lr(0) == pytest.approx(0.1)
    assert lr(5 * spe // 2) == pytest.approx(0.1 + (3.2 - 0.1) * (5 * spe // 2) / (5 * spe))
    assert lr(5 * spe) == pytest.approx(3.2)
    assert lr(30 * spe - 1) == pytest.approx(3.2)
    assert lr(30 * spe) == pytest.approx(0.32)
    assert lr(60 * spe) == pytest.approx(0.032)
    assert lr(80 * spe) == pytest.approx(0.0032)


def test_warmup_then_polynomial_decay():
    spe, epochs, warmup = 100, 10, 2
    lr = lambda step: warmup_poly(step, peak_lr=8.0, steps_per_epoch=spe, total_epochs=epochs,
                                  warmup_epochs=warmup, end_lr=1e-4, power=2.0)
    assert lr(0) == 0.0
    assert lr(100) == pytest.approx(4.0)
    assert lr(200) == pytest.approx(8.0)
    halfway = 200 + (1000 - 200) // 2
    assert lr(halfway) == pytest.approx(1e-4 + (8.0 - 1e-4) * 0.5**2)
    assert lr(1000) == pytest.approx(1e-4)
    assert lr(5000) == pytest.approx(1e-4)  # past the end: stays at end_lr


def test_poly_power_shapes_the_decay():
    common = dict(peak_lr=1.0, steps_per_epoch=10, total_epochs=10, warmup_epochs=0, end_lr=0.0)
    assert warmup_poly(50, power=1.0, **common) == pytest.approx(0.5)
    assert warmup_poly(50, power=2.2, **common) == pytest.approx(0.5**2.2)  # Fujitsu's power
