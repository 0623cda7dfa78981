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


IMAGENET_TRAIN = 1_281_167  # images: a paper's batch as a share of the data, the bench's --ratio


class Claim(NamedTuple):
    name: str  # the method, as a verdict line names it
    against: str = BASELINE_ARM  # the arm the gap is measured from
    bound: float = -MARGIN  # top-1 points: the least gap the claim allows (-3: "no more than 3 below")
    # The claim's scope: the batches (images per step) it was shown at, None above: no upper end; and whether it
    # was shown at small-batch SGD's epochs, as the bench trains every arm. None: no claim (a control arm).
    batches: tuple[int, int | None] | None = None
    same_epochs: bool = True
    source: str = ""  # where the claim and its scope are printed


CLAIMS = {
    "goyal_sgd": Claim(
        "SGD, linear LR rule (Goyal et al.)",
        batches=(256, 8192),
        source="Goyal et al. 2017, arXiv 1706.02677, abstract: no loss of accuracy with minibatches up to 8192"
        " images, 90 epochs as the batch-256 baseline",
    ),
    "lars_you": Claim(
        "LARS (You et al.)",
        batches=(256, 32768),
        source="You et al. 2017, arXiv 1709.05011, abstract and Table 4: ResNet-50 at batch 32k in 90 epochs"
        " (75.4 %), the baseline's accuracy",
    ),
    "lars_mlperf": Claim(
        "LARS (MLPerf)",
        batches=(3264, 3264),
        same_epochs=False,
        source="NVIDIA's MLPerf v1.0 result logs (mlcommons/training_results_v1.0, dgxa100 resnet result_*.txt):"
        " 75.9 % reached at batch 3264 in 35-37 epochs, a time-to-target claim, not equal accuracy",
    ),
    "lamb": Claim(
        "LAMB (You et al. 2020)",
        batches=(256, 32768),
        source="You et al., arXiv 1904.00962, and the authors' ResNet-50 log (fastalgo/imagenet_resnet50_lamb"
        " log.out line 1145): 76.34 % at batch 32768 in 3519 steps (90 epochs)",
    ),
    "neumann": Claim(
        "Neumann optimizer",
        batches=(32000, 32000),
        same_epochs=False,
        source="Krishnan et al., arXiv 1712.03298, sec. 4.2 and Table 3: 24.0 % error at batch 32000 in 237"
        " epochs, with no increase in the total number of steps",
    ),
    "nlcg": Claim(
        "NLCG (Adya et al.)",
        SAME_BATCH_SGD,
        10.0,
        batches=(65536, None),
        source="Adya, Palakkode, Tuzel 2018, arXiv 1812.02886, abstract: more than 10 points above SGD at"
        " batches greater than 65k, 90 epochs",
    ),
    "sgd_sqrt": Claim("SGD, square-root LR rule (control)"),
}
AGAINST = {BASELINE_ARM: "small-batch SGD", SAME_BATCH_SGD: "Goyal's SGD at the same batch"}


def in_scope(claim: Claim, ratio: float) -> bool:
    """Whether a large batch of ``ratio`` x the data lies in the claim's scope, by the README's mapping (a share
    of tin10 stands for the same share of ImageNet's 1,281,167 training images), at the claim's epochs."""
    if claim.batches is None or not claim.same_epochs:
        return False
    low, high = claim.batches
    share = ratio * IMAGENET_TRAIN
    # rounding: 2.5 % of ImageNet is 32,029 images, You et al.'s 32,768 is 2.56 %
    return low <= share * 1.03 and (high is None or share <= high * 1.03)


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
