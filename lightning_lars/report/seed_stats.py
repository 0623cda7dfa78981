"""Intervals over seeds: Student-t quantiles and Welch's interval for a difference of two means.

Written out (no scipy, which the project does not depend on); checked against the printed t table.
"""

from __future__ import annotations

import math
import statistics


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile by bisection on the CDF (Simpson's rule on the density, 2,000 panels)."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float) -> float:  # 0.5 + integral from 0 to t; the density is even
        n, h = 2000, t / 2000
        f = [math.exp(log_c - (df + 1) / 2 * math.log1p((i * h) ** 2 / df)) for i in range(n + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    lo, hi = 0.0, 1000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def welch_gap(arm: list[float], base: list[float], level: float = 0.95):
    """(mean difference, low, high) of arm - base, Welch's interval; None below 2 values on either side."""
    return welch_contrast([arm], [base], level)


def welch_contrast(plus: list[list[float]], minus: list[list[float]], level: float = 0.95):
    """(sum of the ``plus`` groups' means - sum of the ``minus`` groups' means, low, high): Welch's interval with
    Satterthwaite's degrees of freedom over independent groups (two groups: Welch's t interval; four: how far
    a change of set-up moved a gap). None when a group has fewer than 2 values."""
    groups = [*plus, *minus]
    if any(len(g) < 2 for g in groups):
        return None
    parts = [statistics.variance(g) / len(g) for g in groups]  # squared standard errors of the means
    value = sum(map(statistics.fmean, plus)) - sum(map(statistics.fmean, minus))
    total = sum(parts)
    if total == 0:
        return value, value, value
    df = total**2 / sum(v**2 / (len(g) - 1) for v, g in zip(parts, groups, strict=True))
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(total)
    return value, value - half, value + half


MARGIN = 3.0  # top-1 points: the loss to small-batch SGD a published "same accuracy" claim is allowed here


def verdict(low: float, high: float, margin: float = MARGIN) -> str:
    """Whether a 95 % interval of (large batch - small batch) top-1 shows the claim "no worse than ``margin``
    points below": it holds when the whole interval lies above -margin, fails when it lies below."""
    if low >= -margin:
        return f"holds within {margin:g} points"
    if high < -margin:
        return f"does not hold: more than {margin:g} points below"
    return f"undecided: the interval spans -{margin:g} points"
