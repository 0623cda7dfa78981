"""lightning_lars/report/factor_study.py: one row per factor level and arm, the gap's move from the base set-up,
and the README section, from runs written the way benchmarks/bench_largebatch.py writes them."""

import json

import numpy as np
import pytest

from lightning_lars.core.errors import UserError
from lightning_lars.report import factor_study, runs_file, runs_table

DATASET = {"name": "tin10", "train": 5000, "val": 500, "classes": 10, "sha256": "1c14ff06badde89e"}


def run(arm, seed, final, ratio=0.1, epochs=8, width="quarter", lr_rule="linear"):
    factors = {"width": width} | ({} if arm == "sgd_small" else {"lr_rule": lr_rule})
    return runs_file.bench_row(
        arm=arm, recipe="goyal_8k" if arm == "sgd_small" else "nvidia_mlperf10_3264", overrides=[],
        dataset=DATASET, ratio=ratio, batch=64 if arm == "sgd_small" else round(5000 * ratio), epochs=epochs,
        resolution=32, seed=seed, top1=[10.0, final], wall_s=60.0, machine="test", commit="abc", factors=factors,
    )  # fmt: skip


# final top-1 per seed and cell: the MLPerf LARS arm closes the gap at 16 epochs and at ratio 0.025
CELLS = {
    ("sgd_small", 0.1, 8, "linear"): [52.0, 51.0, 53.0],
    ("lars_mlperf", 0.1, 8, "linear"): [42.0, 43.0, 41.0],
    ("lars_mlperf", 0.025, 8, "linear"): [50.0, 52.0, 51.0],
    ("lars_mlperf", 0.1, 8, "sqrt"): [45.0, 46.0, 44.0],
    ("sgd_small", 0.1, 16, "linear"): [60.0, 61.0, 59.0],
    ("lars_mlperf", 0.1, 16, "linear"): [59.0, 60.0, 58.5],
}


@pytest.fixture
def runs():
    return [
        run(arm, seed, final, ratio=ratio, epochs=epochs, lr_rule=rule)
        for (arm, ratio, epochs, rule), finals in CELLS.items()
        for seed, final in enumerate(finals)
    ]


def test_one_row_per_factor_level_and_arm_with_the_gap_and_its_move(runs):
    rows = {(r["factor level"], r["arm"]): r for r in factor_study.rows(runs)}
    assert list(rows)[:2] == [("today's set-up", "sgd_small"), ("today's set-up", "lars_mlperf")]
    # small-batch SGD does not change with the ratio or the LR rule: listed for today's and for 16 epochs only
    assert [level for level, arm in rows if arm == "sgd_small"] == ["today's set-up", "epochs 16"]
    assert set(rows) >= {("ratio 0.025", "lars_mlperf"), ("LR rule sqrt", "lars_mlperf")}
    base = np.mean(CELLS[("sgd_small", 0.1, 8, "linear")])
    for level, cell in (("ratio 0.025", ("lars_mlperf", 0.025, 8, "linear")), ("epochs 16", None)):
        finals = CELLS[cell] if cell else CELLS[("lars_mlperf", 0.1, 16, "linear")]
        small = base if cell else np.mean(CELLS[("sgd_small", 0.1, 16, "linear")])
        row = rows[(level, "lars_mlperf")]
        assert (
            row["n"] == "3"
            and row["top-1 % (mean +- std)"] == f"{np.mean(finals):.1f} +- {np.std(finals, ddof=1):.1f}"
        )
        assert row["gap to sgd_small [95 % CI]"].startswith(f"{np.mean(finals) - small:+.1f} [")
        today_gap = np.mean(CELLS[("lars_mlperf", 0.1, 8, "linear")]) - base
        assert row["gap moved [95 % CI]"].startswith(f"{np.mean(finals) - small - today_gap:+.1f} [")
    assert rows[("today's set-up", "lars_mlperf")]["gap moved [95 % CI]"] == "-"
    # ratio 0.025 shares today's small-batch runs: its move is Welch's interval of the two LARS cells alone
    stats = pytest.importorskip("scipy.stats")
    want = stats.ttest_ind(
        CELLS[("lars_mlperf", 0.025, 8, "linear")], CELLS[("lars_mlperf", 0.1, 8, "linear")], equal_var=False
    ).confidence_interval(0.95)
    assert rows[("ratio 0.025", "lars_mlperf")]["gap moved [95 % CI]"].endswith(
        f"[{want.low:+.1f}, {want.high:+.1f}]"
    )
    assert rows[("ratio 0.025", "lars_mlperf")]["batch"] == 125


def test_verdicts_conclude_where_the_interval_allows(runs):
    lines = runs_table.verdicts(runs).splitlines()
    at_16 = next(line for line in lines if "16 epochs" in line)
    assert at_16.startswith(
        "LARS (MLPerf) at 10 % of the data (tin10, ratio 0.1, 16 epochs, 32 px; batch 500)"
    )
    assert at_16.endswith(": holds within 3 points")  # -0.8, seeds 1 point apart: the interval stays above -3
    today = next(line for line in lines if "8 epochs, 32 px; batch 500" in line)
    assert today.endswith(": does not hold: more than 3 points below")  # -10, seeds 1 point apart


def test_readme_section_is_rewritten_between_its_markers(runs, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"head\n{factor_study.BEGIN}\nstale rows\n{factor_study.END}\ntail\n")
    factor_study.update_readme(readme, runs, tmp_path / "docs" / "study.png")
    text = readme.read_text()
    assert text.startswith(f"head\n{factor_study.BEGIN}\n| factor level |") and text.endswith(
        f"{factor_study.END}\ntail\n"
    )
    assert (
        "stale rows" not in text and "](docs/study.png)" in text and text.count("holds within 3 points") == 1
    )
    assert (tmp_path / "docs" / "study.png").read_bytes()[:4] == b"\x89PNG"
    readme.write_text("no markers\n")
    with pytest.raises(UserError, match="factor-study:begin"):
        factor_study.update_readme(readme, runs, None)
    assert readme.read_text() == "no markers\n"


def test_held_out_runs_get_their_own_section_and_never_join_the_validation_table(runs, tmp_path):
    """The same cells evaluated on held-out training images render into their own block with --held-out (no
    plot on --plot ''), and neither table mixes them with the runs evaluated on the validation images."""
    held = [r | {"factors": r["factors"] | {"holdout": {"share": 0.1, "seed": 0}}} for r in runs]
    for r in held:
        r["top1_per_epoch"] = [v - 5.0 for v in r["top1_per_epoch"]]  # another evaluation set, other values
    assert factor_study.rows(runs + held) == factor_study.rows(runs)
    assert factor_study.rows(runs + held, held_out=True) != factor_study.rows(runs)
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs + held))
    held_begin, held_end = factor_study.markers("factor-study-heldout")
    readme = tmp_path / "README.md"
    readme.write_text(f"{factor_study.BEGIN}\nkept\n{factor_study.END}\n{held_begin}\nstale\n{held_end}\n")
    argv = ["--runs", str(path), "--readme", str(readme), "--section", "factor-study-heldout", "--plot", ""]
    factor_study.main([*argv, "--held-out"])
    text = readme.read_text()
    assert text.startswith(f"{factor_study.BEGIN}\nkept\n{factor_study.END}\n{held_begin}\n")
    assert text.split(held_begin)[1].startswith(f"\n{factor_study.markdown(held, held_out=True)}")
    assert "stale" not in text and "![" not in text and text.endswith(f"{held_end}\n")


def test_a_runs_file_of_the_other_evaluation_set_is_one_line_naming_the_option_and_the_readme_stays(
    runs, tmp_path
):
    """Held-out rows read without --held-out (or validation rows with it) would render an empty table."""
    held = [r | {"factors": r["factors"] | {"holdout": {"share": 0.1, "seed": 0}}} for r in runs]
    readme = tmp_path / "README.md"
    before = f"{factor_study.BEGIN}\nkept\n{factor_study.END}\n"
    readme.write_text(before)
    for rows, option, fix in ((held, [], "add --held-out"), (runs, ["--held-out"], "leave out --held-out")):
        path = tmp_path / "runs.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(SystemExit, match=f"all evaluated on .*: {fix} to read them") as stopped:
            factor_study.main(["--runs", str(path), "--readme", str(readme), "--plot", "", *option])
        assert len(str(stopped.value).splitlines()) == 1 and f"its {len(rows)} runs" in str(stopped.value)
        assert readme.read_text() == before
