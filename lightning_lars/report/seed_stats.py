"""Student's t over seeds: its exact tail (`make check`'s one-sided test), its quantiles and Welch's interval for a
difference of two means.

Written out (no scipy, which the project does not depend on); checked against closed forms and the printed t table.
"""

from __future__ import annotations

import math
import statistics


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((qam + 2 * m) * (a + 2 * m)),
            -(a + m) * (qab + m) * x / ((a + 2 * m) * (qap + 2 * m)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):  # the continued fraction converges fast on this side
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (exact, via the incomplete beta)."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return tail if t >= 0 else 1.0 - tail


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile: the t with P(T <= t) = ``p`` (0.5 <= p < 1), by bisection on the exact tail."""
    lo, hi = 0.0, 1000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1.0 - t_sf(mid, df) < p else (lo, mid)
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


def verdict(low: float, high: float, bound: float = -MARGIN) -> str:
    """Whether a 95 % interval of a top-1 gap shows a claim "the gap is at least ``bound`` points" (-3: no more
    than 3 points below; +10: more than 10 above): it holds when the whole interval lies at or above ``bound``,
    fails when it lies below, and is undecided when it spans it."""
    if low >= bound:
        return f"holds within {-bound:g} points" if bound <= 0 else f"holds: at least {bound:g} points above"
    if high < bound:
        return (
            f"does not hold: more than {-bound:g} points below"
            if bound <= 0
            else f"does not hold: less than {bound:g} points above"
        )
    return f"undecided: the interval spans {bound:+g} points"


def seeds_to_decide(
    arm: list[float], base: list[float], level: float = 0.95, bound: float = -MARGIN, most=100
):
    """The fewest seeds per arm (both arms alike) whose Welch interval would leave ``bound`` outside, were the
    means and spreads seen so far to stay; None when even ``most`` would not (a gap on the bound)."""
    distance = abs(statistics.fmean(arm) - statistics.fmean(base) - bound)
    spreads = [statistics.variance(arm), statistics.variance(base)]
    for n in range(max(len(arm), len(base), 2), most + 1):
        parts = [v / n for v in spreads]
        df = sum(parts) ** 2 / sum(p**2 / (n - 1) for p in parts) if sum(parts) else math.inf
        if t_quantile(0.5 + level / 2, min(df, 1e6)) * math.sqrt(sum(parts)) < distance:
            return n
    return None


def welch_p(arm: list[float], base: list[float], bound: float = 0.0) -> float | None:
    """Two-sided p-value of Welch's test that the gap ``arm`` - ``base`` equals ``bound``: below 1 - level exactly
    when the Welch interval at that level leaves ``bound`` outside. None below 2 values on either side."""
    if min(len(arm), len(base)) < 2:
        return None
    parts = [statistics.variance(g) / len(g) for g in (arm, base)]
    distance = statistics.fmean(arm) - statistics.fmean(base) - bound
    if sum(parts) == 0:
        return 0.0 if distance else 1.0
    df = sum(parts) ** 2 / sum(v**2 / (len(g) - 1) for v, g in zip(parts, (arm, base), strict=True))
    return min(1.0, 2 * t_sf(abs(distance) / math.sqrt(sum(parts)), df))


def holm(p_values: list[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the order given: the i-th smallest p times (m - i + 1),
    never below the one before it, at most 1. A hypothesis is rejected at family-wise level alpha when its
    adjusted p is at most alpha."""
    m = len(p_values)
    adjusted = [1.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
