"""CaffePoly against Intel Caffe's solver, written out from src/caffe/solvers/sgd_solver.cpp."""

import pytest

from lightning_lars.schedules.lr import CaffePoly
from lightning_lars.schedules.phases import EpochClock


def intel_caffe_rate(iter_, *, base_lr, max_iter, power, warmup_iter, warmup_start_lr):
    """SGDSolver::GetLearningRate with lr_policy "poly" and warmup_iter > 0, as the C++ computes it."""
    if warmup_iter > 0 and iter_ < warmup_iter:  # GetWarmUpLR
        return (iter_ * base_lr + (warmup_iter - iter_) * warmup_start_lr) / warmup_iter
    return base_lr * (1.0 - iter_ / max_iter) ** power


@pytest.mark.parametrize(
    "spe, epochs, warmup_epochs, start", [(39, 90, 12, 0.0), (156, 100, 5, 0.5), (10, 3, 0, 0.0)]
)
def test_matches_intel_caffe_at_every_step(spe, epochs, warmup_epochs, start):
    peak = 40.0
    clock = EpochClock(spe, epochs)
    schedule = CaffePoly.from_epochs(clock, peak, warmup_epochs=warmup_epochs, start_lr=start, power=2.0)
    for step in range(spe * epochs):
        ours = schedule(step)
        theirs = intel_caffe_rate(
            step,
            base_lr=peak,
            max_iter=spe * epochs,
            power=2.0,
            warmup_iter=spe * warmup_epochs,
            warmup_start_lr=start,
        )
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12), step


def test_decay_counts_from_step_zero_so_the_lr_drops_after_warmup():
    spe, epochs, warmup = 39, 90, 12
    lr = CaffePoly.from_epochs(EpochClock(spe, epochs), 40.0, warmup_epochs=warmup, power=2.0)
    tw, total = warmup * spe, epochs * spe
    assert lr(tw - 1) == pytest.approx(40.0 * (tw - 1) / tw)
    assert lr(tw) == pytest.approx(40.0 * (1 - 12 / 90) ** 2)  # 30.04, not 40: (1 - t/T)^2 from t = 0
    assert lr(total) == 0.0 and lr(total + 5) == 0.0
