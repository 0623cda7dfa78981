"""The published claim each large-batch arm of ``benchmarks/bench_largebatch.py`` tests, and the verdict a 95 %
Welch interval of its gap gives on it.

A claim is a bound on a gap of final top-1, in points, against the arm its paper compares with. Most papers
claim "the same accuracy" at the large batch: the gap to small-batch SGD no more than ``MARGIN`` points below.
NLCG's claim is a gain over SGD at the same large batch (Adya, Palakkode, Tuzel 2018, arXiv 1812.02886,
abstract: "at extremely large mini-batch sizes of greater than 65k, NLCG optimizer is able to improve top-1
accuracy by more than 10 percentage points"), so its line measures the gap to Goyal's SGD at that batch.
Imports only its neighbours ``bench_key`` and ``seed_stats``.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

from lightning_lars.report.bench_key import BASELINE_ARM
from lightning_lars.report.seed_stats import MARGIN, seeds_to_decide, verdict, welch_gap

SAME_BATCH_SGD = "goyal_sgd"  # SGD at the large batch, its LR by Goyal et al.'s linear rule


class Claim(NamedTuple):
    name: str  # the method, as a verdict line names it
    against: str = BASELINE_ARM  # the arm the gap is measured from
    bound: float = -MARGIN  # top-1 points: the least gap the claim allows (-3: "no more than 3 below")


CLAIMS = {
    "goyal_sgd": Claim("SGD, linear LR rule (Goyal et al.)"),
    "lars_you": Claim("LARS (You et al.)"),
    "lars_mlperf": Claim("LARS (MLPerf)"),
    "lamb": Claim("LAMB (You et al. 2020)"),
    "neumann": Claim("Neumann optimizer"),
    "nlcg": Claim("NLCG (Adya et al.)", SAME_BATCH_SGD, 10.0),
}
AGAINST = {BASELINE_ARM: "small-batch SGD", SAME_BATCH_SGD: "Goyal's SGD at the same batch"}


def claim_of(arm: str) -> Claim:
    return CLAIMS.get(arm, Claim(arm))


def judge(claim: Claim, arm: list[float], against: list[float]) -> str:
    """``claim``'s gap (``arm`` - ``against``, final top-1 per seed), its 95 % Welch interval and the verdict; for
    an undecided one, how many seeds would decide it were the means and spreads to stay."""
    gap = welch_gap(arm, against)
    if gap is None:
        return "needs >= 2 finished seeds per arm for an interval"
    diff, low, high = gap
    text = (
        f"{diff:+.1f} points{'' if claim.against == BASELINE_ARM else ' over ' + AGAINST[claim.against]}"
        f", 95 % CI [{low:+.1f}, {high:+.1f}] (Welch, n={len(arm)}+{len(against)};"
        f" {statistics.fmean(arm):.1f} % vs {statistics.fmean(against):.1f} %): {verdict(low, high, claim.bound)}"
    )
    if low < claim.bound <= high:
        n = seeds_to_decide(arm, against, bound=claim.bound)
        text += (
            f" ({n} seeds per arm would decide it at this spread)"
            if n
            else " (over 100 seeds per arm at this spread: the gap sits on the bound)"
        )
    return text
