"""Which rows the fair set-up's verdicts read (lightning_lars/report/verdict_rows.py, plan-fair.toml stage 5): each
arm at the LR scale its held-out trials chose; the rule's-LR rows of a tuned arm kept apart; an arm with no trials
untuned and said so; a tuned arm with no run at its scale yet still in Holm's family."""

import pytest

from lightning_lars.report import fair_report, plan, runs_file, runs_table, seed_stats, verdict_rows

PLAN = """[setup]
width = "full"
epochs = 2
resolution = 32
[decision]
[planned]
default = 3
[tuning]
holdout = 0.1
holdout_seed = 0
lr_scales = [0.5, 1.0, 2.0]
trial_seeds = 2
[[tune]]
arms = "sgd_small"
ratio = 0.025
lr_rule = "sqrt"
[[tune]]
arms = "lars_you"
ratio = 0.025
lr_rule = "sqrt"
"""


def row(arm, seed, final, scale=None, holdout=False):
    factors = {"lr_rule": "sqrt"} | ({} if scale is None else {"lr_scale": scale})
    if holdout:
        factors["holdout"] = {"share": 0.1, "seed": 0}
    return runs_file.bench_row(
        arm=arm, recipe="r", overrides=[], ratio=0.025, batch=64 if arm == "sgd_small" else 125, epochs=2,
        dataset={"name": "photos", "train": 5000, "val": 500, "classes": 10}, resolution=32, seed=seed,
        top1=[10.0, final], wall_s=60.0, machine="m", commit="c", factors=factors,
    )  # fmt: skip


def trials():
    """sgd_small's held-out best at x1, lars_you's at x2 (the trials of every scale have run)."""
    best = {"sgd_small": 1.0, "lars_you": 2.0}
    return [
        row(arm, seed, 60.0 if scale == best[arm] else 50.0, scale, holdout=True)
        for arm in best
        for scale in (0.5, 1.0, 2.0)
        for seed in range(2)
    ]


BASE = [57.0, 58.0, 59.0]
RULE_LR = [40.0, 41.0, 42.0]  # lars_you at x1, the rule's LR: far below, so reading it would show
CHOSEN = [58.0, 59.0, 58.6]  # lars_you at x2, the scale its trials chose
UNTUNED = [58.5, 59.5, 59.0]  # lamb: the plan gives it no trials


def runs(with_chosen=True):
    out = [row("sgd_small", s, v) for s, v in enumerate(BASE)]
    out += [row("lars_you", s, v) for s, v in enumerate(RULE_LR)]
    out += [row("lars_you", s, v, 2.0) for s, v in enumerate(CHOSEN)] if with_chosen else []
    return out + [row("lamb", s, v) for s, v in enumerate(UNTUNED)]


@pytest.fixture
def the_plan(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text(PLAN)
    return plan.load(path)


def test_each_arm_is_read_at_the_scale_its_trials_chose_and_the_rule_lr_rows_go_apart(the_plan):
    reading = verdict_rows.split(runs(), the_plan, trials())
    assert reading.chosen == {("lars_you", 0.025, "sqrt"): 2.0, ("sgd_small", None, None): 1.0}
    assert [runs_file.final_top1(r) for r in reading.apart] == RULE_LR
    assert verdict_rows.split(reading.read, the_plan, trials()).read == reading.read  # folded rows stay read
    lines = fair_report.lines(reading.read, the_plan, reading.chosen, reading.apart)
    by_arm = {(line.claim.name, line.bound): line for line in lines}
    lars = by_arm[("LARS (You et al.)", -1.0)]
    assert (lars.arm, lars.against) == (CHOSEN, BASE)
    assert lars.tuning == "LR x2, chosen on held-out training images"
    lamb = by_arm[("LAMB (You et al. 2020)", -1.0)]
    assert (lamb.arm, lamb.tuning) == (UNTUNED, "the rule's LR, untuned (the plan gives this arm no trials)")
    decided = fair_report.decide(lines, the_plan)
    raw = [seed_stats.welch_p(d[0].arm, d[0].against, d[0].bound) for d in decided]
    assert [d[1] for d in decided] == pytest.approx(seed_stats.holm(raw))


def test_a_tuned_arm_not_yet_run_at_its_scale_keeps_its_lines_in_holms_family(the_plan):
    full = verdict_rows.split(runs(), the_plan, trials())
    family = len(fair_report.lines(full.read, the_plan, full.chosen, full.apart))
    reading = verdict_rows.split(runs(with_chosen=False), the_plan, trials())
    lines = fair_report.lines(reading.read, the_plan, reading.chosen, reading.apart)
    assert len(lines) == family == 4  # LARS and LAMB, each a 1-point and a 3-point line (in scope at 2.5 %)
    waiting = [d for d in fair_report.decide(lines, the_plan) if d[0].claim.name == "LARS (You et al.)"]
    assert [(d[0].arm, d[1], d[2]) for d in waiting] == [
        ([], None, "not decided: 0+3 of the planned 3+3 seeds")
    ] * 2


def test_before_every_trial_has_run_the_rule_lr_is_read_and_marked_untuned(the_plan):
    reading = verdict_rows.split(runs(), the_plan, trials()[:-1])
    assert reading.chosen[("lars_you", 0.025, "sqrt")] is None
    lines = fair_report.lines(reading.read, the_plan, reading.chosen, reading.apart)
    lars = next(line for line in lines if line.claim.name == "LARS (You et al.)")
    assert (lars.arm, lars.tuning) == (RULE_LR, "the rule's LR, untuned until its trials have all run")


def test_the_section_shows_the_read_rows_and_the_rows_apart_each_with_its_scale(the_plan):
    text = fair_report.section(runs(), None, the_plan, trials())
    table, apart = text.split("Rows at an LR scale their arm's trials did not choose")
    assert "| lars_you (r), LR x2 tuned |" in table and "| 58.53 +- 0.50, n=3 |" in table
    assert "| lars_you (r) |" in apart and "| 41.00 +- 1.00, n=3 |" in apart
    assert "| lamb (r) |" in table and "| lamb (r) |" not in apart


def test_a_row_at_another_scale_says_its_scale_in_the_table():
    (x2,) = [r for r in runs_table.table_rows([row("lars_you", 0, 58.0, 2.0)]) if r["run"] == "lars_you (r)"]
    assert x2["data set"].endswith("ratio 0.025, sqrt LR x2")
