"""The fair set-up's verdicts as its plan (``benchmarks/plan-fair.toml``) fixes them: each arm at its planned n
(the first n seeds in seed order, never more), every line tested against its claim's bound by Welch's two-sided
test, Holm's correction over all verdict lines at once, and each line marked in or out of its claim's scope
(``claims.in_scope``: out of scope is an extrapolation, listed apart). The square-root SGD arm is a control: its
lines are intervals of what a layer-wise arm adds over SGD on the same LR rule, with no verdict.

    python -m lightning_lars.report.fair_report [--runs recipes/runs-fair.jsonl] [--plan PLAN]   # prints the section
    python -m lightning_lars.report.fair_report --readme README.md [--plot docs/runs.png]         # rewrites it
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import NamedTuple

from lightning_lars.core.errors import UserError
from lightning_lars.report import runs_file, runs_table, verdict_rows
from lightning_lars.report.bench_key import BASELINE_ARM, RunKey, setup_label
from lightning_lars.report.claims import AGAINST, IMAGENET_TRAIN, Claim, claim_of, in_scope
from lightning_lars.report.plan import Plan, chosen_scale, held_out_scores, load
from lightning_lars.report.seed_stats import holm, welch_gap, welch_p
from lightning_lars.report.verdict_rows import tuning_note

CONTROL_ARM = "sgd_sqrt"  # SGD on the square-root rule: the layer-wise arms' LR rule without the adaptation
LAYER_WISE = ("lars_you", "lars_mlperf", "lamb", "nlcg", "neumann")


class Line(NamedTuple):
    claim: Claim
    setup: RunKey
    batch: int
    bound: float
    arm: list[float]  # final top-1 of the planned seeds that finished
    against: list[float]
    planned: tuple[int, int]  # n of the arm and of the arm it is measured from
    have: tuple[int, int]  # seeds run of each, up to the planned n
    in_scope: bool
    tuning: str = ""  # the arm's LR: chosen on held-out images, or untuned and why (``verdict_rows``)


def planned_finals(runs: list[dict], n: int) -> tuple[list[float], int]:
    """Final top-1 of seeds 0 .. n-1 (diverged runs left out) and how many of those seeds have run."""
    chosen = [r for r in runs if r["seed"] < n]
    return runs_table.finals(chosen), len(chosen)


def lines(rows: list[dict], plan: Plan, chosen: dict | None = None, apart=()) -> list[Line]:
    """Every verdict line the plan tests: per set-up and arm with a claim, its in-scope bounds (the 1-point margin,
    then the wide one beside it, for a same-accuracy claim) or, out of scope, the wide bound only. ``rows``: those
    the verdicts read (``verdict_rows.split``); ``chosen``: its tuned scales, to name each line's LR; ``apart``: the
    rows kept apart, which only name lines (a tuned arm none of whose runs at its chosen scale has run yet still
    has its line, with 0 seeds, in Holm's family)."""
    every = verdict_rows.with_stand_ins(rows, apart)
    out = []
    for setup, arms in every.items():
        for arm, named in arms.items():
            claim = claim_of(arm)
            if arm == BASELINE_ARM or claim.batches is None:
                continue
            against = runs_table._against(every, setup, arm)
            if against is None:
                continue
            runs, against = verdict_rows.real(named), verdict_rows.real(against)
            scoped = in_scope(claim, setup.ratio)
            if claim.bound > 0:  # a claimed gain: one bound
                bounds = [claim.bound]
            elif scoped:
                bounds = [-plan.decision.margin_in_scope, -plan.decision.margin_wide]
            else:
                bounds = [-plan.decision.margin_wide]
            for bound in bounds:
                narrow = scoped and bound == -plan.decision.margin_in_scope  # its own, larger n
                n_arm = plan.planned_n(arm, setup.ratio, one_point=narrow)
                n_base = plan.planned_n(claim.against, setup.ratio, one_point=narrow)
                a, have_a = planned_finals(runs, n_arm)
                b, have_b = planned_finals(against, n_base)
                planned, have = (n_arm, n_base), (have_a, have_b)
                note = "" if chosen is None else tuning_note(chosen, arm, setup.ratio, setup.lr_rule)
                line = Line(claim, setup, named[0]["batch"], bound, a, b, planned, have, scoped, note)
                out.append(line)
    return out


def decide(found: list[Line], plan: Plan) -> list[tuple[Line, float | None, str]]:
    """Each line with its Holm-adjusted p-value (None before its planned n) and its verdict."""
    raw = []
    for line in found:
        complete = line.have == line.planned and min(len(line.arm), len(line.against)) >= 2
        raw.append(welch_p(line.arm, line.against, line.bound) if complete else None)
    # a line short of its planned n stays in the family, as a p-value of 1: it cannot be rejected
    adjusted = holm([1.0 if p is None else p for p in raw]) if plan.decision.correction == "holm" else raw
    out = []
    for line, p, adj in zip(found, raw, adjusted, strict=True):
        if p is None:
            have, want = "+".join(map(str, line.have)), "+".join(map(str, line.planned))
            out.append((line, None, f"not decided: {have} of the planned {want} seeds"))
            continue
        gap = statistics.fmean(line.arm) - statistics.fmean(line.against)
        out.append((line, adj, _words(gap, line.bound, adj <= plan.decision.alpha)))
    return out


def _points(size: float) -> str:
    return f"{size:g} point{'' if size == 1 else 's'}"


def _words(gap: float, bound: float, rejected: bool) -> str:
    if not rejected:
        return f"undecided at the planned n: {bound:+g} points not excluded after Holm's correction"
    if bound <= 0:
        return (
            f"holds within {_points(-bound)}"
            if gap > bound
            else f"does not hold: more than {_points(-bound)} below"
        )
    return (
        f"holds: at least {_points(bound)} above"
        if gap > bound
        else f"does not hold: less than {_points(bound)} above"
    )


def line_text(line: Line, adjusted: float | None, words: str) -> str:
    claim = line.claim
    head = f"{claim.name} at {100 * line.setup.ratio:g} % of the data ({setup_label(line.setup)}; batch {line.batch}"
    head += f"; {line.tuning})" if line.tuning else ")"
    head += f", bound {line.bound:+g}" + (
        "" if line.in_scope else f"; extrapolation: {outside(claim, line.setup.ratio)}"
    )
    gap = welch_gap(line.arm, line.against)
    if gap is None:
        return f"{head}: {words}"
    diff, low, high = gap
    over = "" if claim.against == BASELINE_ARM else " over " + AGAINST[claim.against]
    p = "" if adjusted is None else f", Holm-adjusted p {adjusted:.2g}"
    return (
        f"{head}: {diff:+.1f} points{over}, 95 % CI [{low:+.1f}, {high:+.1f}] (Welch, n={len(line.arm)}+"
        f"{len(line.against)}{p}): {words}"
    )


def outside(claim: Claim, ratio: float) -> str:
    """Why a line is an extrapolation: its batch against the paper's (this share of ImageNet), its epochs."""
    low, high = claim.batches
    share = ratio * IMAGENET_TRAIN
    reasons = []
    if not in_scope(claim._replace(same_epochs=True), ratio):
        shown = f"over {low:,}" if high is None else f"{low:,}" if low == high else f"{low:,}-{high:,}"
        reasons.append(f"{share:,.0f} images of ImageNet per step, the paper's {shown}")
    if not claim.same_epochs:
        reasons.append(
            "the paper's epoch budget is not small-batch SGD's, and it was not run at its own here"
        )
    return "; ".join(reasons)


def contrasts(rows: list[dict], plan: Plan, apart=()) -> list[str]:
    """What each layer-wise arm adds over SGD on the same square-root rule at the same batch: the gap of their
    planned seeds and its 95 % Welch interval, no verdict. ``rows`` and ``apart`` as in `lines`."""
    out = []
    for setup, arms in verdict_rows.with_stand_ins(rows, apart).items():
        if CONTROL_ARM not in arms:
            continue
        control, have = planned_finals(
            verdict_rows.real(arms[CONTROL_ARM]), plan.planned_n(CONTROL_ARM, setup.ratio)
        )
        for arm in (a for a in LAYER_WISE if a in arms):
            mine, _ = planned_finals(verdict_rows.real(arms[arm]), plan.planned_n(arm, setup.ratio))
            gap = welch_gap(mine, control)
            text = "needs >= 2 seeds each" if gap is None else f"{gap[0]:+.1f} [{gap[1]:+.1f}, {gap[2]:+.1f}]"
            out.append(
                f"{claim_of(arm).name} over SGD on the same square-root rule at {100 * setup.ratio:g} % of the"
                f" data: {text} (n={len(mine)}+{len(control)})"
            )
    return out


def tuning_lines(trials: list[dict], plan: Plan) -> list[str]:
    """Per arm, share and rule: held-out top-1 per LR scale (mean over the trial seeds run) and the scale the plan's
    rule picks (``plan.chosen_scale``), once every trial of that arm has run."""
    out = []
    found = held_out_scores(trials)
    want = len(plan.tuning.get("lr_scales", [])) * plan.tuning.get("trial_seeds", 0)
    for (arm, ratio, rule), by_scale in sorted(found.items(), key=lambda item: tuple(map(str, item[0]))):
        shown = ", ".join(
            f"x{k:g}: {statistics.fmean(by_scale[k]):.1f} % (n={len(by_scale[k])})" for k in sorted(by_scale)
        )
        scale = chosen_scale(by_scale, plan)
        done = sum(len(by_scale.get(k, [])) for k in plan.tuning["lr_scales"])
        pick = f"{done} of {want} trials run, no choice yet" if scale is None else f"chosen: x{scale:g}"
        where = "" if ratio is None else f" at {100 * ratio:g} % ({rule} rule)"
        out.append(f"{arm}{where}, held-out top-1 per LR scale: {shown}; {pick}")
    return out


def section(rows: list[dict], plot_ref: str | None, plan: Plan | None = None, trials=()) -> str:
    """The table of the rows the verdicts read, the plot, the verdicts, the contrasts, the rows kept apart and the
    tuning lines. ``rows``: the whole runs file (it is split here, ``verdict_rows.split``)."""
    plan = plan or load()
    reading = verdict_rows.split(rows, plan, list(trials))
    rows = reading.read
    parts = [runs_table.markdown(rows)]
    if plot_ref:
        parts.append(f"![top-1 per epoch per arm, mean and 95 % interval of the mean over seeds]({plot_ref})")
    decided = decide(lines(rows, plan, reading.chosen, reading.apart), plan)
    m = len(decided)
    head = (
        f"Verdicts at the planned n ({plan.source and Path(plan.source).name}: the first n seeds in seed order),"
        f" Welch's two-sided test of each gap against its bound, Holm's correction over all {m} lines at"
        f" family-wise alpha {plan.decision.alpha:g}; the interval beside each is the uncorrected 95 % one."
    )
    inside = [line_text(*d) for d in decided if d[0].in_scope]
    outside = [line_text(*d) for d in decided if not d[0].in_scope]
    parts.append(head + "\n\nIn the claim's scope (its paper's batches and epochs):\n\n" + _bullets(inside))
    parts.append("Extrapolations (outside the paper's batches or epoch budget):\n\n" + _bullets(outside))
    control = contrasts(rows, plan, reading.apart)
    if control:
        parts.append("Layer-wise adaptation beyond the LR rule (no verdict):\n\n" + _bullets(control))
    if reading.apart:
        base = [r for r in rows if r.get("arm") == BASELINE_ARM]
        parts.append(
            "Rows at an LR scale their arm's trials did not choose (the rule's LR, run before the trials), with the"
            " baseline the verdicts read; no verdict reads them:\n\n"
            + runs_table.markdown(reading.apart + base)
        )
    parts.append(
        "Tuning on held-out training images (runs-tuning.jsonl; each verdict above reads its arm at the scale"
        " chosen here):\n\n" + _bullets(tuning_lines(list(trials), plan))
    )
    return "\n\n".join(parts)


def _bullets(texts: list[str]) -> str:
    return "\n".join(f"- {t}" for t in texts) if texts else "- none yet"


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, default=root / "recipes" / "runs-fair.jsonl")
    parser.add_argument("--plan", type=Path, default=None)
    parser.add_argument(
        "--readme", type=Path, default=None, help="rewrite its 'Runs of ours' (default: print)"
    )
    parser.add_argument("--plot", type=Path, default=root / "docs" / "runs.png", help="with --readme")
    parser.add_argument("--tuning-runs", type=Path, default=root / "recipes" / "runs-tuning.jsonl")
    args = parser.parse_args(argv)
    try:
        plan = load(args.plan) if args.plan else load()
        trials = runs_file.read_runs(args.tuning_runs, required=True)
        rows = runs_file.read_runs(args.runs, required=True)
        if args.readme is None:
            print(section(rows, None, plan, trials))
            return
        render = lambda _read, ref: section(rows, ref, plan, trials)  # noqa: E731
        read = verdict_rows.split(rows, plan, trials).read  # the plot draws what the verdicts read
        runs_table.update_readme(args.readme, read, args.plot, render=render)
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"{args.readme}: 'Runs of ours' rewritten from {args.runs} at {plan.source}'s planned n")


if __name__ == "__main__":
    main()
