"""lightning_lars/report/runs_table.py: the README's "Runs of ours" rendered from a runs.jsonl written here."""

import json
import math

import numpy as np
import pytest

from lightning_lars.core.errors import UserError
from lightning_lars.report import bench_key, runs_file, runs_plot, runs_table, seed_stats

DATASET = {"path": "/data/photos", "name": "photos", "train": 5000, "val": 500, "classes": 10}
# final top-1 per seed; the baseline and LAMB have equal spreads, so Welch's df is exactly 2
FINALS = {"sgd_small": [60.0, 62.0], "lars_you": [50.0, 52.0], "lamb": [61.0, 66.0]}
RECIPES = {"sgd_small": "goyal_8k", "goyal_sgd": "goyal_8k", "lars_you": "resnet50_32k", "lamb": "lamb_32k",
           "nlcg": "nlcg_65k"}  # fmt: skip


def run(arm, seed, final, ratio=0.1, top1=None):
    return runs_file.bench_row(
        arm=arm, recipe=RECIPES[arm],
        overrides=["seed=0"], dataset=DATASET, ratio=ratio, batch=64 if arm == "sgd_small" else 500, epochs=3,
        resolution=32, seed=seed, top1=top1 or [20.0, 40.0, final], wall_s=90.0, machine="2-core CPU",
        commit="abc1234",
    )  # fmt: skip


@pytest.fixture
def filled_runs(tmp_path):
    path = tmp_path / "runs.jsonl"
    for arm, finals in FINALS.items():
        for seed, final in enumerate(finals):
            runs_file.append_run(run(arm, seed, final), path)
    check_row = {  # what `make check` appends (lightning_lars/check.py runs_row)
        "recipe": "demo", "hardware": "1 devices", "epochs": "8", "top-1 (mean +- std, n)": "81.00 +- 1.00 %, n=3",
        "time": "250.0 s wall, target not reached", "date": "2026-11-26", "log or W&B run": "logs/demo/check/x",
    }  # fmt: skip
    with path.open("a") as out:
        out.write(json.dumps(check_row) + "\n")
    return path


@pytest.mark.parametrize(("df", "table"), [(1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228), (30, 2.042)])
def test_t_quantile_matches_the_printed_t_table(df, table):
    assert seed_stats.t_quantile(0.975, df) == pytest.approx(table, abs=1e-3)


def test_welch_interval_by_hand():
    gap, lo, hi = seed_stats.welch_gap([50.0, 52.0], [60.0, 62.0])
    half = 4.303 * math.sqrt(2 / 2 + 2 / 2)  # variances 2 and 2 over n=2 each, df = 2
    assert gap == pytest.approx(-10.0) and (lo, hi) == pytest.approx((-10 - half, -10 + half), abs=1e-2)
    assert seed_stats.welch_gap([1.0], [2.0, 3.0]) is None


def test_table_rows_give_mean_std_and_gap_per_arm(filled_runs):
    rows = {r["run"].split()[0]: r for r in runs_table.table_rows(runs_file.read_runs(filled_runs))}
    for arm, finals in FINALS.items():
        mean, std = np.mean(finals), np.std(finals, ddof=1)
        assert rows[arm]["top-1 % (mean +- std, n)"] == f"{mean:.2f} +- {std:.2f}, n=2"
        assert rows[arm]["per seed"] == " ".join(f"{v:.1f}" for v in finals)
    assert rows["sgd_small"]["gap to small-batch SGD"] == "-"
    assert rows["lars_you"]["gap to small-batch SGD"].startswith("-10.0 [")
    assert rows["make"]["top-1 % (mean +- std, n)"] == "81.00 +- 1.00 %, n=3"  # make check's row, as written
    markdown = runs_table.markdown(runs_file.read_runs(filled_runs))
    assert markdown.count("\n") == 1 + 4  # header, rule, three arms and the check row


def test_verdict_lines_name_the_claim_the_gap_and_whether_it_holds(filled_runs):
    text = runs_table.verdicts(runs_file.read_runs(filled_runs))
    lines = {line.split(" at ")[0]: line for line in text.splitlines()}
    half = 4.303 * math.sqrt(2 / 2 + 2 / 2)  # t(0.975, df=2) from the printed table; variances 2 and 2, n=2
    assert lines["LARS (You et al.)"] == (
        "LARS (You et al.) at 10 % of the data (photos, ratio 0.1, 3 epochs, 32 px; batch 500):"
        f" -10.0 points, 95 % CI [{-10 - half:+.1f}, {-10 + half:+.1f}] (Welch, n=2+2; 51.0 % vs 61.0 %)"
        ": does not hold: more than 3 points below"
    )  # -10 +- 6.1: the whole interval lies below -3
    assert ": undecided: the interval spans -3 points (" in lines["LAMB (You et al. 2020)"]
    assert lines["LAMB (You et al. 2020)"].endswith(" seeds per arm would decide it at this spread)")
    assert "sgd_small" not in text


@pytest.mark.parametrize(
    ("low", "high", "words"),
    [
        (-2.9, 1.3, "holds within 3 points"),
        (-3.0, -1.0, "holds within 3 points"),  # the interval touches -3: no worse than 3 points
        (-9.0, -3.1, "does not hold: more than 3 points below"),
        (-3.1, 5.0, "undecided: the interval spans -3 points"),
    ],
)
def test_a_verdict_concludes_only_when_the_interval_is_on_one_side_of_the_margin(low, high, words):
    assert seed_stats.verdict(low, high) == words


@pytest.mark.parametrize(
    ("low", "high", "words"),
    [
        (10.5, 14.0, "holds: at least 10 points above"),
        (1.1, 4.3, "does not hold: less than 10 points above"),
        (-20.0, 9.9, "does not hold: less than 10 points above"),
        (9.0, 12.0, "undecided: the interval spans +10 points"),
    ],
)
def test_a_claimed_gain_holds_only_when_the_whole_interval_clears_it(low, high, words):
    assert seed_stats.verdict(low, high, bound=10.0) == words


def test_seeds_to_decide_is_the_first_n_whose_interval_clears_the_margin():
    """Equal spreads and n per arm: Welch's df is 2n - 2. Variances 2 and 2, gap -1 (2 points from the margin):
    the half-width t(0.975, 2n - 2) * sqrt(4 / n) first drops below 2 at n = 6 (printed t table: 2.228 at df 10,
    against sqrt(6) = 2.449; at n = 5, 2.306 at df 8 against sqrt(5) = 2.236)."""
    assert seed_stats.seeds_to_decide([-1.0, 1.0], [0.0, 2.0]) == 6
    assert seed_stats.seeds_to_decide([-3.0, -1.0], [0.0, 2.0]) is None  # a gap of -3 exactly: never
    # the same distance from a claimed gain of +1 (gap -1, 2 points below it): the same count
    assert seed_stats.seeds_to_decide([-1.0, 1.0], [0.0, 2.0], bound=1.0) == 6
    assert seed_stats.seeds_to_decide([0.0, 2.0], [0.0, 2.0], bound=0.0) is None


def test_nlcgs_line_measures_its_claimed_gain_over_sgd_at_the_same_batch(filled_runs):
    """Adya et al.'s abstract claims NLCG more than 10 points above SGD at the same large batch: its line takes
    Goyal's SGD at that batch (which trains under its own linear LR rule) as the other arm, not small-batch SGD;
    the interval is scipy's Welch interval of the two arms' finals."""
    stats = pytest.importorskip("scipy.stats")
    rows = runs_file.read_runs(filled_runs)
    nlcg, sgd = [55.0, 53.0, 54.5], [52.0, 50.5, 51.0]
    rows += [run("nlcg", s, v) | {"factors": {"lr_rule": "sqrt"}} for s, v in enumerate(nlcg)]
    rows += [run("goyal_sgd", s, v) for s, v in enumerate(sgd)]
    lines = {line.split(" at ")[0]: line for line in runs_table.verdicts(rows).splitlines()}
    want = stats.ttest_ind(nlcg, sgd, equal_var=False).confidence_interval(0.95)
    assert lines["NLCG (Adya et al.)"].endswith(
        f": {np.mean(nlcg) - np.mean(sgd):+.1f} points over Goyal's SGD at the same batch,"
        f" 95 % CI [{want.low:+.1f}, {want.high:+.1f}] (Welch, n=3+3; 54.2 % vs 51.2 %)"
        ": does not hold: less than 10 points above"
    )
    goyal = lines["SGD, linear LR rule (Goyal et al.)"]  # Goyal's own claim stays against small-batch SGD
    assert ": -9.8 points, 95 % CI [" in goyal and "(Welch, n=3+2; 51.2 % vs 61.0 %)" in goyal
    # without SGD at its batch the line says which runs it needs, instead of comparing with small-batch SGD
    alone = [r for r in rows if r.get("arm") != "goyal_sgd"]
    assert (
        runs_table.verdicts(alone)
        .splitlines()[-1]
        .endswith(": no runs of Goyal's SGD at the same batch to compare with (run only=goyal_sgd)")
    )


def test_welch_interval_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    arm, base = [41.6, 43.8, 40.2], [52.0, 51.4, 50.1, 53.3]
    want = stats.ttest_ind(arm, base, equal_var=False).confidence_interval(0.95)
    gap, lo, hi = seed_stats.welch_gap(arm, base)
    assert gap == pytest.approx(np.mean(arm) - np.mean(base))
    assert (lo, hi) == pytest.approx((want.low, want.high), abs=1e-4)


def test_a_contrast_of_four_groups_is_satterthwaites_interval():
    stats = pytest.importorskip("scipy.stats")
    a, b, c, d = [50.1, 47.8, 49.4], [51.2, 52.6, 51.8], [41.0, 45.2, 43.1], [50.8, 46.4, 48.0]
    value, lo, hi = seed_stats.welch_contrast([a, d], [b, c])  # (a - b) - (c - d): how far a gap moved
    se2 = [np.var(g, ddof=1) / len(g) for g in (a, b, c, d)]
    df = sum(se2) ** 2 / sum(v**2 / (len(g) - 1) for v, g in zip(se2, (a, b, c, d)))  # Satterthwaite, float64
    half = stats.t.ppf(0.975, df) * math.sqrt(sum(se2))
    assert value == pytest.approx(np.mean(a) - np.mean(b) - np.mean(c) + np.mean(d))
    assert (lo, hi) == pytest.approx((value - half, value + half), abs=1e-4)
    # groups without spread add nothing: Welch's two-group interval, shifted by their means
    want = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    got = seed_stats.welch_contrast([a, [3.0, 3.0]], [b, [1.0, 1.0]])
    assert got[1:] == pytest.approx((want.low + 2, want.high + 2), abs=1e-4)


def test_rows_with_a_data_hash_and_factors_are_their_own_set_up(filled_runs):
    rows = runs_file.read_runs(filled_runs)
    hashed = {**DATASET, "sha256": "1c14ff06badde89e"}
    for seed, final in enumerate((58.0, 60.0)):
        row = run("lars_you", seed, final)
        rows.append(row | {"dataset": hashed, "factors": {"width": "full", "lr_rule": "sqrt"}})
    table = runs_table.table_rows(rows)
    labels = [r["data set"] for r in table if r["run"].startswith("lars_you")]
    assert labels == [
        "photos (5000/500 img, 10 classes, 32 px), ratio 0.1",  # the old rows read as before
        "photos #1c14ff06 (5000/500 img, 10 classes, 32 px), ratio 0.1, full width, sqrt LR",
    ]
    # no small-batch SGD on that data set: the line says so instead of comparing across data
    assert "no runs of small-batch SGD to compare with" in runs_table.verdicts(rows).splitlines()[-1]


def test_small_batch_sgd_is_compared_at_every_ratio_and_listed_once(filled_runs):
    rows = runs_file.read_runs(filled_runs)
    rows += [run("lamb", s, 55.0 + s, ratio=0.05) for s in (0, 1)]
    assert sum(r["run"].startswith("sgd_small") for r in runs_table.table_rows(rows)) == 1
    assert runs_table.verdicts(rows).count("LAMB (You et al. 2020) at") == 2
    key = bench_key.RunKey("sgd_small", "photos", 0.05, 3, 32, 1)
    assert any(bench_key.same_run(r, key) for r in rows)  # kept from ratio 0.1
    assert not any(bench_key.same_run(r, key._replace(arm="lars_you")) for r in rows)


def test_readme_section_between_the_markers_is_rewritten_with_the_plot(filled_runs, tmp_path):
    readme = tmp_path / "README.md"
    before, after = "# Title\n\n### Runs of ours\n\n", "\n\n## Next section\nkept text\n"
    readme.write_text(f"{before}{runs_table.BEGIN}\nold table\n{runs_table.END}{after}")
    rows = runs_file.read_runs(filled_runs)
    for _ in range(2):  # a second rendering replaces the first
        runs_table.update_readme(readme, rows, tmp_path / "docs" / "runs.png")
    text = readme.read_text()
    assert text.startswith(before + runs_table.BEGIN) and text.endswith(runs_table.END + after)
    assert "old table" not in text and text.count("| lamb (lamb_32k) |") == 1
    assert "![top-1 per epoch per arm](docs/runs.png)" in text
    assert (tmp_path / "docs" / "runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_files_are_one_line_errors(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    with pytest.raises(UserError, match="runs-of-ours:begin"):
        runs_table.update_readme(readme, [], None)
    assert readme.read_text() == "no markers here\n"  # nothing lost
    runs = tmp_path / "runs.jsonl"
    runs.write_text('{"kind": "x"}\n{not json\n')
    with pytest.raises(UserError, match="line 2"):
        runs_file.read_runs(runs)


def test_the_command_prints_unless_given_a_readme_and_a_missing_runs_file_is_one_line(
    filled_runs, tmp_path, capsys
):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n{runs_table.BEGIN}\nthe fair set-up's table\n{runs_table.END}\n")
    before = readme.read_bytes()
    plot = tmp_path / "runs.png"
    runs_table.main(["--runs", str(filled_runs), "--plot", str(plot)])
    printed = capsys.readouterr().out
    assert "| lamb (lamb_32k) |" in printed and "Verdicts" in printed
    assert readme.read_bytes() == before and not plot.exists()  # printed only: no file of the project changes

    with pytest.raises(SystemExit) as stopped:  # was: the section emptied, "rewritten from" it, exit 0
        runs_table.main(["--runs", str(tmp_path / "missing.jsonl"), "--readme", str(readme)])
    assert str(stopped.value).startswith("error: ") and "missing.jsonl not found: give --runs FILE" in str(
        stopped.value
    )
    assert "\n" not in str(stopped.value) and readme.read_bytes() == before

    runs_table.main(["--runs", str(filled_runs), "--readme", str(readme), "--plot", str(plot)])
    assert "| lamb (lamb_32k) |" in readme.read_text() and plot.is_file()


def test_the_plots_band_is_scipys_95_percent_interval_of_the_mean_for_every_arm():
    stats = pytest.importorskip("scipy.stats")
    column = [57.2, 59.4, 58.8, 56.6, 58.0]
    want = stats.t.interval(0.95, len(column) - 1, loc=np.mean(column), scale=stats.sem(column))
    mean, low, high = runs_plot.mean_band(column)
    assert mean == pytest.approx(np.mean(column)) and (low, high) == pytest.approx(want, abs=1e-6)
    assert runs_plot.mean_band([58.0]) == (58.0, 58.0, 58.0)  # one seed: no band
    assert all(math.isnan(v) for v in runs_plot.mean_band([58.0, math.nan]))
    assert "95 % interval of the mean" in runs_plot.BAND
