"""Which rows of the fair set-up the verdicts read (``benchmarks/plan-fair.toml``, stage 5): every arm at the LR
scale its tuning trials chose on held-out training images (``plan.chosen_scale``), small-batch SGD's too. A tuned
arm's rows at another scale (the rule's LR, run before its trials) are kept apart and read by no verdict; an arm
the plan gives no trials reads the rule's LR (x1), untuned. A read row at a chosen scale has that scale folded into
its set-up (``factors.tuned_lr_scale`` instead of ``factors.lr_scale``), so that the arms of one share and rule
meet in one set-up whatever scale each chose; the table and the verdict lines say the scale.
"""

from __future__ import annotations

from typing import NamedTuple

from lightning_lars.report import runs_table
from lightning_lars.report.bench_key import TUNED_SCALE, key_of
from lightning_lars.report.plan import Plan, chosen_scale, held_out_scores, tuned_key

STAND_IN = "stands_in"  # a row key: this row only names a line (`with_stand_ins`)


class Reading(NamedTuple):
    read: list[dict]  # the rows the verdicts read, tuned ones folded (module docstring)
    apart: list[dict]  # rows at a scale their arm's trials did not choose
    # (arm, share, rule) of each tuned arm -> its scale; None before its trials
    chosen: dict[tuple, float | None]


def chosen_scales(plan: Plan, trials: list[dict]) -> dict[tuple, float | None]:
    """Each arm the plan tunes (its "tuning" cells) -> the scale its trials chose, None before they all ran."""
    scores = held_out_scores(trials)
    keys = {tuned_key(a, c.ratio, c.lr_rule) for c in plan.cells if c.stage == "tuning" for a in c.arms}
    return {k: chosen_scale(scores.get(k, {}), plan) for k in sorted(keys, key=lambda k: tuple(map(str, k)))}


def split(rows: list[dict], plan: Plan, trials: list[dict]) -> Reading:
    """``rows`` -> the rows the verdicts read and those kept apart (see the module docstring). Rows already
    folded stay read, so a Reading's ``read`` splits to itself."""
    chosen = chosen_scales(plan, trials)
    read, apart = [], []
    for row in rows:
        key = key_of(row)
        if key is None or key.holdout or TUNED_SCALE in row.get("factors", {}):
            read.append(row)  # make check's lines; tuning trials (never a verdict's: runs_table skips them)
            continue
        scale = chosen.get(tuned_key(key.arm, key.ratio, key.lr_rule))
        if key.lr_scale != (1.0 if scale is None else scale):
            apart.append(row)
        elif scale is None:
            read.append(row)  # untuned: the plan has no trials for it, or they have not all run
        else:
            folded = _at_rule_lr(row)
            read.append(folded | {"factors": folded["factors"] | {TUNED_SCALE: scale}})
    return Reading(read, apart, chosen)


def _at_rule_lr(row: dict) -> dict:
    """``row`` without its ``lr_scale``: its set-up reads as the rule's LR (x1)."""
    return row | {"factors": {k: v for k, v in row.get("factors", {}).items() if k != "lr_scale"}}


def with_stand_ins(rows: list[dict], apart: list[dict]) -> dict:
    """``runs_table.groups`` of ``rows`` and of a stand-in for each row kept apart: a row as if at x1 and marked,
    which only names the set-up and arm of a line (a tuned arm none of whose runs at its chosen scale has run yet
    still has its line, with 0 seeds, in Holm's family); `real` drops them before any top-1 is read."""
    return runs_table.groups(list(rows) + [_at_rule_lr(r) | {STAND_IN: True} for r in apart])


def real(runs: list[dict]) -> list[dict]:
    """``runs`` without the stand-ins."""
    return [r for r in runs if not r.get(STAND_IN)]


def tuning_note(chosen: dict[tuple, float | None], arm: str, ratio: float, rule: str) -> str:
    """Words for a verdict line: the arm's LR as its trials chose it, or untuned and why."""
    key = tuned_key(arm, ratio, rule)
    if key not in chosen:
        return "the rule's LR, untuned (the plan gives this arm no trials)"
    if chosen[key] is None:
        return "the rule's LR, untuned until its trials have all run"
    return f"LR x{chosen[key]:g}, chosen on held-out training images"
