"""What a recipe's ``published:`` block says about judging a run, against the sources: the epoch numbers the
MLPerf logs print, Goyal et al.'s median-of-the-last-5-epochs statistic, and a reason wherever a recipe has no
number to test against."""

from __future__ import annotations

import pytest

from lightning_lars import check
from lightning_lars.core.errors import UserError
from lightning_lars.recipe import published
from lightning_lars.recipe.card import card
from lightning_lars.training.recipe_plan import plan_recipe
from tests.unit.recipe_helpers import RECIPES, recipe
from tests.unit.source_oracles import N

# (recipe, eval step, epoch_num the source's log prints there): result_0.txt eval_accuracy metadata
LOGGED_EPOCHS = [
    ("google_mlperf06_32k", 2826, 72),  # v0.6 tpu-v3-2048: crossed 0.759 at epoch_num 72 (ours: 72.46)
    ("google_mlperf06_32k", 157, 4),  # the first eval: epoch_num 4
    ("google_mlperf07_64k", 1738, 88.0),  # v0.7 tpu-v3-8192-TF: crossed at epoch_num 88.0 (ours: 91.47)
    ("google_mlperf07_64k", 1659, 84.0),  # 75.80 % at epoch_num 84.0
    ("google_mlperf07_64k", 79, 4.0),  # the first eval: epoch_num 4.0
]


@pytest.mark.parametrize("name, step, logged", LOGGED_EPOCHS)
def test_source_epoch_is_the_number_the_log_prints(name, step, logged):
    cfg = recipe(name)
    count = published.source_epoch_count(cfg.published)
    assert published.source_epoch(step, count, N, cfg.batch.global_size) == logged
    assert plan_recipe(name).epoch_at(step) != logged  # our count differs there: the reason for the field


@pytest.mark.parametrize("name", ["google_mlperf06_32k", "google_mlperf07_64k"])
def test_card_prints_the_sources_epoch_beside_ours(name):
    plan = plan_recipe(name)
    text = card(plan, devices=1, nodes=1)
    step, logged = {"google_mlperf06_32k": (2826, 72), "google_mlperf07_64k": (1738, 88)}[name]
    assert f"{step} ({plan.epoch_at(step):.4g}; source {logged:g})" in text


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_has_a_target_or_says_why_not(name):
    cfg = recipe(name)
    reason = published.no_target_reason(cfg.published)
    if reason:
        with pytest.raises(UserError, match=r"has no target \(published.no_target\): the abstract"):
            check.target_of(cfg)
        assert f"target: none ({reason})" in card(plan_recipe(name), 1, 1)
    else:
        target, _ = check.target_of(cfg)
        assert 0 < target <= 100
    assert published.statistic_of(cfg.published) in published.STATISTICS


def test_nlcg_has_no_target_and_says_why():
    assert published.no_target_reason(recipe("nlcg_65k").published)


def _record(top1s: list[float]) -> dict:
    evals = [{"epoch": e + 1, "step": 156 * (e + 1), "top1": t, "elapsed_s": e} for e, t in enumerate(top1s)]
    return {"metrics": {"val/top1": top1s[-1] / 100}, "evals": evals}


def test_goyal_is_judged_by_the_median_of_the_last_five_epochs():
    """1706.02677 sec. 5.1: a run's error is the median of its final 5 epochs (not its last epoch)."""
    assert published.statistic_of(recipe("goyal_8k").published) == "median_last_5_epochs"
    record = _record([70.0, 76.0, 76.4, 76.1, 76.3, 76.2, 75.0])  # last 5: 76.4 76.1 76.3 76.2 75.0
    value, _ = published.run_value(record, "median_last_5_epochs", 76.26)
    assert value == pytest.approx(76.2)
    assert published.run_value(record, "final", 76.26)[0] == pytest.approx(75.0)


def test_mlperf_runs_are_judged_at_their_first_eval_at_target():
    record = _record([75.0, 75.95, 75.5])
    assert published.run_value(record, "first_at_target", 75.9)[0] == pytest.approx(75.95)
    assert published.run_value(_record([75.0, 75.5]), "first_at_target", 75.9)[0] == pytest.approx(75.5)


def test_unknown_statistic_is_one_line_naming_the_choices():
    with pytest.raises(UserError, match="use one of final, first_at_target, median_last_5_epochs"):
        published.statistic_of({"statistic": "best"})


def test_make_check_on_goyal_judges_each_seed_by_its_median_of_the_last_five(monkeypatch, tmp_path, capsys):
    """`make check recipe=goyal_8k`: each seed's value is the median of its last 5 epoch evaluations (sec. 5.1),
    and the t-test runs on those medians, not on the last epochs."""
    seeds = {0: [70.0, 76.5, 76.4, 76.6, 76.3, 75.0], 1: [71.0, 76.2, 76.9, 76.5, 76.4, 75.5]}

    def fake_run(recipe_name, seed, run_dir, overrides):
        run_dir.mkdir(parents=True, exist_ok=True)
        record = _record(seeds[seed])
        record["metrics"].update({"time/wall_s": 1.0})
        return record

    monkeypatch.setattr(check, "run_seed", fake_run)
    out = tmp_path / "check"
    check.main(
        ["--recipe", "goyal_8k", "--seeds", "2", "--out", str(out), "--runs-file", str(tmp_path / "r.jsonl")]
    )
    text = (out / "check.txt").read_text()
    assert "median_last_5_epochs" in text
    # medians of the last 5: 76.4 and 76.4 (the last epochs, 75.0 and 75.5, would fail the 76.26 target)
    assert "mean 76.400 %" in text


def test_check_prints_the_epoch_the_source_would_log_at_the_target():
    rows = [
        {
            "seed": 0,
            "top1": 76.06,
            "time_to_target_s": 29.1,
            "wall_s": 30.0,
            "source_epoch": 88.0,
            "taken": "",
        }
    ]
    text = check.report(rows, 75.9, "callbacks.time_to_target.target_top1", 0.05, "first_at_target")
    assert "epoch 88 (source's count)" in text
