"""The exact Student-t tail behind `make check`, against closed forms, and the one-sided test's decisions."""

import math
import statistics
import warnings

import pytest

from lightning_lars.check import one_sided_test, report
from lightning_lars.report.seed_stats import incomplete_beta, t_sf


@pytest.mark.parametrize("t", [-3.0, -0.4, 0.0, 0.7, 1.3, 6.0, 40.0])
def test_t_tail_matches_the_closed_forms(t):
    assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)  # Cauchy
    assert t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    # df = 4: P(T > t) = 1/2 - (3/4) s (1 - s^2 / 3) with s = t / sqrt(4 + t^2)
    s = t / math.sqrt(4 + t * t)
    assert t_sf(t, 4) == pytest.approx(0.5 - 0.75 * s * (1 - s * s / 3), abs=1e-12)


def test_t_tail_tends_to_the_normal_tail_for_large_df():
    for t in (0.5, 1.645, 2.5):
        normal = 0.5 * math.erfc(t / math.sqrt(2))
        assert t_sf(t, 100_000) == pytest.approx(normal, abs=1e-5)


def test_incomplete_beta_of_equal_halves_is_symmetric():
    for a in (0.5, 2.0, 7.5):
        assert incomplete_beta(a, a, 0.5) == pytest.approx(0.5, abs=1e-12)
        assert incomplete_beta(a, 1.5, 0.3) + incomplete_beta(1.5, a, 0.7) == pytest.approx(1.0, abs=1e-12)


def test_one_sided_test_statistic_and_decision():
    values = [76.4, 76.1, 76.3, 76.5, 76.2]
    result = one_sided_test(values, target=75.9)
    t = (statistics.fmean(values) - 75.9) / (statistics.stdev(values) / math.sqrt(5))
    assert result["t"] == pytest.approx(t) and result["df"] == 4
    s = t / math.sqrt(4 + t * t)
    assert result["p"] == pytest.approx(0.5 - 0.75 * s * (1 - s * s / 3))
    assert result["p"] < 0.01  # all five above target with a small spread: the claim stands
    assert one_sided_test(values, target=76.6)["p"] > 0.9  # below target: no claim


def test_degenerate_samples():
    assert math.isnan(one_sided_test([76.0], 75.9)["p"])  # one seed: no test
    assert one_sided_test([76.0, 76.0], 75.9)["p"] == 0.0  # identical runs above target
    assert one_sided_test([75.0, 75.0], 75.9)["p"] == 1.0


def test_identical_seeds_are_not_decided_though_the_t_tests_arithmetic_says_p_0():
    """scipy's ttest_1samp gives t = inf, p = 0 for [30, 30] against 20 (and warns that results may be
    unreliable): two seeds that agree to the digit on a small validation set are no evidence of a mean."""
    scipy_stats = pytest.importorskip("scipy.stats")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert scipy_stats.ttest_1samp([30.0, 30.0], 20.0, alternative="greater").pvalue == 0.0
    assert one_sided_test([30.0, 30.0], 20.0)["p"] == 0.0  # the same arithmetic as scipy's
    rows = [{"seed": s, "top1": 30.0, "time_to_target_s": 1.0, "wall_s": 2.0} for s in (0, 1)]
    text = report(rows, 20.0, "callbacks.time_to_target.target_top1", 0.05)
    assert "not decided: every seed gave 30.00 %, no spread to test against" in text
    assert "claim supported" not in text
