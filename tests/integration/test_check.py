"""`make check` at toy scale: K seeds through the real entry point, mean/std and the one-sided t-test."""

import json
import math
import statistics
import sys

import pytest
from helpers import make_demo_data, run

pytestmark = pytest.mark.slow


def test_two_seeds_give_mean_std_and_an_exact_p_value(tmp_path):
    data = make_demo_data(tmp_path / "data")
    out = tmp_path / "check"
    runs = tmp_path / "runs.jsonl"
    checked = run(
        [
            sys.executable,
            "-m",
            "lightning_lars.check",
            "--recipe",
            "demo",
            "--seeds",
            "2",
            "--out",
            str(out),
            "--runs-file",
            str(runs),
            "debug=toy",
            f"paths.data_dir={data}",
            "callbacks.time_to_target.target_top1=10",
        ],
        timeout=1200,
    )
    assert checked.returncode == 0, (checked.stdout + checked.stderr)[-3000:]

    # The values the check must have used: each seed's own results.json (a full validation at the end).
    top1 = [
        100 * json.loads((out / f"seed_{s}" / "results.json").read_text())["metrics"]["val/top1"]
        for s in (0, 1)
    ]
    seeds = [json.loads((out / f"seed_{s}" / "results.json").read_text())["seed"] for s in (0, 1)]
    assert seeds == [0, 1]
    text = checked.stdout
    assert f"mean {statistics.fmean(top1):.3f} %" in text and "(n=2)" in text
    assert "target   10.00 % (callbacks.time_to_target.target_top1)" in text
    if top1[0] != top1[1]:
        assert f"std {statistics.stdev(top1):.3f}" in text
        # df = 1: Student's t is the Cauchy distribution, P(T > t) = 1/2 - atan(t)/pi, in closed form.
        t = (statistics.fmean(top1) - 10.0) / (statistics.stdev(top1) / math.sqrt(2))
        assert f"t = {t:.3f}, df = 1, p = {0.5 - math.atan(t) / math.pi:.4g}" in text
    assert (out / "check.txt").read_text().strip() in text
    # one row for recipes/README.md's "Runs of ours", from the same results
    [row] = [json.loads(line) for line in runs.read_text().splitlines()]
    std = f"{statistics.stdev(top1):.2f}"
    assert row["top-1 (mean +- std, n)"] == f"{statistics.fmean(top1):.2f} +- {std} %, n=2"
    assert row["recipe"].startswith("demo (debug=toy") and row["hardware"].startswith("1 x CPU")
    assert row["log or W&B run"] == str(out)


def test_a_recipe_without_a_target_is_one_line():
    checked = run(
        [
            sys.executable,
            "-m",
            "lightning_lars.check",
            "--recipe",
            "demo",
            "--seeds",
            "2",
            "callbacks.time_to_target.target_top1=null",
        ],
        timeout=1200,
    )
    assert checked.returncode == 2
    assert checked.stderr.strip().startswith("error: no target to test against")
    assert len(checked.stderr.strip().splitlines()) == 1
