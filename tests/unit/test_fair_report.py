"""The fair set-up's plan and verdicts: Holm's correction against the procedure as Holm (1979) states it, Welch's
p-value against scipy, each claim's scope against its paper's numbers, the plan file against the rows it claims
to reproduce, and verdicts read at the planned n only."""

import collections
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_lars.core.errors import UserError
from lightning_lars.report import bench_key, claims, fair_report, plan, runs_file, seed_stats

ROOT = Path(__file__).resolve().parents[2]


def holm_rejects(p_values, alpha):
    """Holm 1979, sec. 2, written out: order the p-values p(1) <= ... <= p(m); reject H(1), H(2), ... while
    p(i) <= alpha / (m - i + 1), and stop at the first that is not (it and all after it are kept)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    rejected = set()
    for i, index in enumerate(order, 1):
        if p_values[index] > alpha / (m - i + 1):
            break
        rejected.add(index)
    return rejected


@pytest.mark.parametrize("seed", range(20))
def test_holm_adjusted_p_rejects_exactly_what_holms_procedure_rejects(seed):
    rng = random.Random(seed)
    p = [rng.choice([rng.random(), rng.random() / 100, 0.01, 0.0125]) for _ in range(rng.randint(1, 15))]
    adjusted = seed_stats.holm(p)
    for alpha in (0.01, 0.0125, 0.025, 0.05, 0.1):
        assert {i for i, a in enumerate(adjusted) if a <= alpha} == holm_rejects(p, alpha)


def test_holm_by_hand():
    # m = 4, sorted 0.01, 0.02, 0.03, 0.04: 0.04, 0.06, then max(0.06, 0.06), max(0.06, 0.04)
    assert seed_stats.holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert seed_stats.holm([0.5, 0.9]) == [1.0, 1.0]


@pytest.mark.parametrize("bound", [-3.0, -1.0, 0.0, 10.0])
def test_welch_p_is_scipys_welch_test_of_the_gap_against_the_bound(bound):
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(int(bound * 10) + 7)
    arm = [58 + rng.gauss(0, 1.4) for _ in range(6)]
    base = [57.7 + rng.gauss(0, 1.4) for _ in range(25)]
    want = stats.ttest_ind([a - bound for a in arm], base, equal_var=False).pvalue
    assert seed_stats.welch_p(arm, base, bound) == pytest.approx(want, rel=1e-6)
    # the test and the interval agree: the bound lies outside the 95 % interval exactly when p < 0.05
    _, low, high = seed_stats.welch_gap(arm, base)
    assert (seed_stats.welch_p(arm, base, bound) < 0.05) == (not low <= bound <= high)


@pytest.mark.parametrize(
    ("arm", "ratio", "inside"),
    [
        ("goyal_sgd", 0.025, False),  # Goyal et al.'s abstract: up to 8192 images, 0.64 % of ImageNet
        ("lars_you", 0.025, True),  # You et al.: 32k, 2.56 % of ImageNet, 90 epochs
        ("lars_you", 0.1, False),
        ("lamb", 0.025, True),
        ("lamb", 0.1, False),
        ("nlcg", 0.1, True),  # Adya et al.: more than 65k, over 5.1 %
        ("nlcg", 0.025, False),
        ("neumann", 0.025, False),  # 237 epochs at batch 32000, not SGD's epochs
        ("lars_mlperf", 0.025, False),  # batch 3264, a time-to-target claim
        ("sgd_sqrt", 0.1, False),  # a control: no claim
    ],
)
def test_each_claim_is_in_scope_only_at_its_papers_batches_and_epochs(arm, ratio, inside):
    assert claims.in_scope(claims.claim_of(arm), ratio) == inside


def test_every_claim_names_its_source():
    for arm, claim in claims.CLAIMS.items():
        assert claim.batches is None or "arXiv" in claim.source or "MLPerf" in claim.source, arm


def test_the_plans_first_stages_are_the_rows_the_fair_runs_file_holds():
    """Run in order, the cells before this plan's own give each arm, share and rule exactly the seeds
    recipes/runs-fair.jsonl holds (the bench skips kept runs, so the last cell of each names the count)."""
    the_plan = plan.load()
    seeds = {}
    for cell in the_plan.cells:
        if cell.stage in ("first", "extended"):
            for arm in cell.arms:
                key = (arm, cell.ratio, None if arm == "sgd_small" else cell.lr_rule)
                seeds[key] = max(seeds.get(key, 0), cell.seeds)
    # the rows from before the plan: their factors were filled in afterwards and say so ("inferred")
    rows = [
        r for r in runs_file.read_runs(ROOT / "recipes" / "runs-fair.jsonl") if "inferred" in r["factors"]
    ]
    held = collections.Counter((r["arm"], r["ratio"], r["factors"].get("lr_rule")) for r in rows)
    # small-batch SGD's rows name one ratio; the baseline is the same at every share
    assert seeds == dict(held)
    for arm, ratio, rule in held:
        kept = sorted(
            r["seed"]
            for r in rows
            if (r["arm"], r["ratio"], r["factors"].get("lr_rule")) == (arm, ratio, rule)
        )
        assert kept == list(range(len(kept)))  # seeds 0 .. n-1: "the first n" is well defined


def test_every_cell_of_the_plan_is_in_the_runs_files_and_no_row_lies_outside_the_plan():
    """The whole plan, run in order as fair_setup.sh runs it, leaves exactly the rows the two files hold: each
    arm, share, rule, held-out share and LR scale its seeds 0 .. n-1 (n the largest count a cell names), a tuned
    cell at the scale its trials chose, nothing beyond, and every row at the plan's set-up. Small-batch SGD's rows
    are one set-up whatever share and rule they name (``plan.tuned_key``)."""
    the_plan = plan.load()
    trials = runs_file.read_runs(ROOT / "recipes" / "runs-tuning.jsonl")
    wanted = {}
    for cell in the_plan.cells:
        for arm in cell.arms:
            scale = cell.lr_scale
            if cell.tuned:
                scale = plan.scale_for(the_plan, trials, arm, cell.ratio, cell.lr_rule)
            key = (*plan.tuned_key(arm, cell.ratio, cell.lr_rule), cell.holdout, scale)
            wanted[key] = max(wanted.get(key, 0), cell.seeds)
    held = collections.defaultdict(list)
    setup = tuple(the_plan.setup[k] for k in ("width", "epochs", "resolution"))
    for row in runs_file.read_runs(ROOT / "recipes" / "runs-fair.jsonl") + trials:
        key = bench_key.key_of(row)
        assert (key.width, key.epochs, key.resolution) == setup
        held[(*plan.tuned_key(key.arm, key.ratio, key.lr_rule), key.holdout, key.lr_scale)].append(key.seed)
    assert {key: sorted(seeds) for key, seeds in held.items()} == {
        key: list(range(n)) for key, n in wanted.items()
    }


def test_the_plan_prints_its_cells_for_the_shell():
    out = subprocess.run(
        [sys.executable, "-m", "lightning_lars.report.plan", "--stages", "sqrt-sgd"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines()[0] == "sgd_sqrt|3|--ratio 0.025 --lr-rule sqrt|verdict"
    bad = subprocess.run(
        [sys.executable, "-m", "lightning_lars.report.plan", "--stages", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode != 0 and "no stage nope" in bad.stderr and "\n" not in bad.stderr.strip()


def test_every_tuned_arm_gets_the_same_trials_on_held_out_images_before_the_runs_that_use_them():
    the_plan = plan.load()
    stages = [c.stage for c in the_plan.cells]
    assert stages.index("tuning") > stages.index("planned-n") and stages.index("one-point") > max(
        i for i, s in enumerate(stages) if s == "tuning"
    )
    budget = collections.Counter()
    for cell in the_plan.cells:
        if cell.stage == "tuning":
            assert "--holdout 0.1 --holdout-seed 0 --lr-scale" in cell.options()
            for arm in cell.arms:
                budget[arm, cell.ratio] += cell.seeds
    scales = len(the_plan.tuning["lr_scales"])
    assert budget[("sgd_small", 0.1)] == scales * the_plan.tuning["trial_seeds"]
    assert set(budget.values()) == {scales * the_plan.tuning["trial_seeds"]}  # the same for every arm


def test_a_plan_without_its_sections_is_a_one_line_error(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text("[decision]\nalpha = 0.05\n")
    with pytest.raises(UserError, match="needs \\[setup\\]"):
        plan.load(path)
    path.write_text('[setup]\nwidth="full"\nepochs=1\nresolution=8\n[decision]\ncorrection = "bonferoni"\n')
    with pytest.raises(UserError, match="pick from holm"):
        plan.load(path)


def row(arm, seed, final, ratio=0.025):
    return runs_file.bench_row(
        arm=arm, recipe="r", overrides=[], ratio=ratio, batch=64 if arm == "sgd_small" else 125, epochs=2,
        dataset={"name": "photos", "train": 5000, "val": 500, "classes": 10}, resolution=32, seed=seed,
        top1=[10.0, final], wall_s=1.0, machine="m", commit="c", factors={"lr_rule": "sqrt"},
    )  # fmt: skip


def test_verdicts_read_the_first_planned_seeds_only(tmp_path):
    """LARS at 2.5 % is in scope: a 1-point and a 3-point line. With n = 3 planned, seeds 3 and 4 (far below)
    change nothing; with one of the 3 missing, the line waits."""
    path = tmp_path / "plan.toml"
    path.write_text('[setup]\nwidth="full"\nepochs=2\nresolution=32\n[decision]\n[planned]\ndefault = 3\n')
    the_plan = plan.load(path)
    base = [row("sgd_small", s, v) for s, v in enumerate([57.0, 58.0, 59.0, 58.5])]
    lars = [row("lars_you", s, v) for s, v in enumerate([58.0, 59.0, 58.6, 20.0, 21.0])]
    decided = fair_report.decide(fair_report.lines(base + lars, the_plan), the_plan)
    assert [(d[0].bound, d[0].arm, d[0].against) for d in decided] == [
        (-1.0, [58.0, 59.0, 58.6], [57.0, 58.0, 59.0]),
        (-3.0, [58.0, 59.0, 58.6], [57.0, 58.0, 59.0]),
    ]
    raw = [seed_stats.welch_p(d[0].arm, d[0].against, d[0].bound) for d in decided]
    assert [d[1] for d in decided] == pytest.approx(seed_stats.holm(raw))
    path.write_text(path.read_text() + "[planned.one_point]\nsgd_small = 4\nlars_you = 5\n")
    wider = plan.load(path)  # the 1-point line reads its own n; the 3-point line beside it keeps 3 + 3
    one, three = fair_report.lines(base + lars, wider)
    assert (one.planned, one.against, len(one.arm)) == ((5, 4), [57.0, 58.0, 59.0, 58.5], 5)
    assert three.planned == (3, 3)
    short = fair_report.decide(fair_report.lines(base + lars[:2], the_plan), the_plan)
    assert short[0][1] is None and short[0][2] == "not decided: 2+3 of the planned 3+3 seeds"


def test_a_decided_line_names_its_margin_in_words_one_point_singular(tmp_path):
    """Three points above small-batch SGD with seeds 0.1 apart: both in-scope lines hold, each in its own words."""
    path = tmp_path / "plan.toml"
    path.write_text('[setup]\nwidth="full"\nepochs=2\nresolution=32\n[decision]\n[planned]\ndefault = 3\n')
    the_plan = plan.load(path)
    base = [row("sgd_small", s, v) for s, v in enumerate([57.0, 57.1, 56.9])]
    lars = [row("lars_you", s, v) for s, v in enumerate([60.0, 60.1, 59.9])]
    words = [d[2] for d in fair_report.decide(fair_report.lines(base + lars, the_plan), the_plan)]
    assert words == ["holds within 1 point", "holds within 3 points"]


def trial(arm, seed, scale, final):
    held = {"lr_rule": "sqrt", "holdout": {"share": 0.1, "seed": 0}, "lr_scale": scale}
    return row(arm, seed, final, ratio=0.1) | {"factors": held}


def test_tuning_picks_the_best_held_out_scale_once_every_trial_has_run_ties_to_the_nearest_one():
    the_plan = plan.load()  # 3 scales x 2 seeds
    finals = {0.5: [50.0, 52.0], 1.0: [55.0, 57.0], 2.0: [56.0, 56.0]}  # x1 and x2 tie at 56.0
    trials = [trial("sgd_small", s, k, v) for k, vs in finals.items() for s, v in enumerate(vs)]
    (line,) = fair_report.tuning_lines(trials, the_plan)
    assert line.startswith("sgd_small, held-out top-1 per LR scale: x0.5: 51.0 % (n=2), x1: 56.0 % (n=2)")
    assert line.endswith("; chosen: x1")
    trials[-1] = trial("sgd_small", 1, 2.0, 60.0)
    assert fair_report.tuning_lines(trials, the_plan)[0].endswith("; chosen: x2")
    assert fair_report.tuning_lines(trials[:4], the_plan)[0].endswith("; 4 of 6 trials run, no choice yet")
    assert fair_report.lines(trials, the_plan) == []  # never a verdict's


def test_a_line_outside_its_papers_scope_says_extrapolation_and_why():
    the_plan = plan.load()
    base = [row("sgd_small", s, v) for s, v in enumerate([57.0, 58.0, 59.0])]
    goyal = [
        row("goyal_sgd", s, v) | {"factors": {"lr_rule": "linear"}} for s, v in enumerate([56.0, 57.0, 58.0])
    ]
    (line,) = fair_report.lines(base + goyal, the_plan)
    assert not line.in_scope and line.bound == -3.0  # Goyal et al.: up to 8,192 images; 2.5 % is 32,029
    text = fair_report.line_text(line, None, "x")
    assert "; extrapolation: 32,029 images of ImageNet per step, the paper's 256-8,192:" in text
    section = fair_report.section(base + goyal, None, the_plan)
    assert section.index("Extrapolations") < section.index("SGD, linear LR rule (Goyal et al.) at 2.5 %")


def test_the_square_root_sgd_control_gives_each_layer_wise_arm_a_contrast_and_no_verdict():
    stats = pytest.importorskip("scipy.stats")
    the_plan = plan.load()
    base = [row("sgd_small", s, v) for s, v in enumerate([57.0, 58.0, 59.0])]
    control = [row("sgd_sqrt", s, v) for s, v in enumerate([55.0, 56.5, 55.5])]
    lars = [row("lars_you", s, v) for s, v in enumerate([58.0, 59.0, 58.6])]
    rows = base + control + lars
    (text,) = fair_report.contrasts(rows, the_plan)
    want = stats.ttest_ind([58.0, 59.0, 58.6], [55.0, 56.5, 55.5], equal_var=False).confidence_interval(0.95)
    assert text == (
        "LARS (You et al.) over SGD on the same square-root rule at 2.5 % of the data:"
        f" +2.9 [{want.low:+.1f}, {want.high:+.1f}] (n=3+3)"
    )
    assert all(
        line.claim.name != "SGD, square-root LR rule (control)" for line in fair_report.lines(rows, the_plan)
    )


def test_a_tuned_cell_asks_for_the_chosen_scale_and_is_refused_before_the_trials_ran(tmp_path):
    trials = tmp_path / "runs-tuning.jsonl"
    finals = {0.5: [50.0, 52.0], 1.0: [55.0, 57.0], 2.0: [58.0, 59.0]}
    rows = [
        trial("lars_you", s, k, v) | {"ratio": 0.025} for k, vs in finals.items() for s, v in enumerate(vs)
    ]
    trials.write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))
    command = [sys.executable, "-m", "lightning_lars.report.plan", "--scale-for", "lars_you", "0.025", "sqrt"]
    early = subprocess.run([*command, "--tuning-runs", str(trials)], capture_output=True, text=True, cwd=ROOT)
    assert early.returncode != 0 and early.stderr.strip() == (
        "error: lars_you at 0.025 (sqrt rule) has 5 of its tuning trials: run STAGES=tuning first"
    )
    trials.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run([*command, "--tuning-runs", str(trials)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout == "2\n"
    nan = rows[:-1] + [trial("lars_you", 1, 2.0, 0.0) | {"ratio": 0.025, "top1_per_epoch": [10.0, None]}]
    assert plan.chosen_scale(plan.held_out_scores(nan)[("lars_you", 0.025, "sqrt")], plan.load()) == 1.0
    lines = subprocess.run(
        [sys.executable, "-m", "lightning_lars.report.plan", "--stages", "one-point"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert lines[1] == "lars_you|37|--ratio 0.025 --lr-rule sqrt|tuned:0.025:sqrt"


def test_small_batch_sgds_trials_answer_its_one_point_line_whatever_rule_the_line_names(tmp_path):
    """The bench writes no LR rule for small-batch SGD (it trains at the recipe's batch, nothing to move), while
    the plan's one-point stage asks for it under the line's rule: its trials must still answer."""
    finals = {0.5: [50.0, 52.0], 1.0: [55.0, 57.0], 2.0: [56.0, 54.0]}
    rows = []
    for k, vs in finals.items():
        for s, v in enumerate(vs):
            r = trial("sgd_small", s, k, v)
            del r["factors"]["lr_rule"]
            rows.append(r)
    trials = tmp_path / "runs-tuning.jsonl"
    trials.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = subprocess.run(
        [sys.executable, "-m", "lightning_lars.report.plan", "--stages", "one-point"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    ).stdout.splitlines()  # fmt: skip
    arm, _, _, kind = lines[0].split("|")
    _, ratio, rule = kind.split(":")
    command = [sys.executable, "-m", "lightning_lars.report.plan", "--scale-for", arm, ratio, rule]
    done = subprocess.run([*command, "--tuning-runs", str(trials)], capture_output=True, text=True, cwd=ROOT)
    assert (arm, done.returncode, done.stdout) == ("sgd_small", 0, "1\n")


def test_the_readmes_runs_of_ours_is_what_the_command_renders_from_the_tracked_files(tmp_path, capsys):
    """The command prints the section; ``--readme`` rewrites a README's: from the plan and runs files in the
    repository, the section the README holds now (so it reads from those files, not from an edit by hand)."""
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    fair_report.main([])  # prints; the repository's README is the oracle below, left alone
    printed = capsys.readouterr().out
    fair_report.main(["--readme", str(readme), "--plot", str(tmp_path / "docs" / "runs.png")])
    assert readme.read_text() == (ROOT / "README.md").read_text()
    begin, end = "<!-- runs-of-ours:begin -->", "<!-- runs-of-ours:end -->"
    section = readme.read_text().split(begin)[1].split(end)[0].strip()
    without_plot = re.sub(r"\n\n!\[[^\]]*\]\(docs/runs\.png\)", "", section)  # printing draws no plot
    assert without_plot != section and without_plot == printed.strip()
