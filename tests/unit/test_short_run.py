"""``trainer.max_steps=N`` as a smoke test of a real recipe: the first N steps of the full plan. The LR is the full
run's at every step, the plan names the full run and says once that this one stops early, and an evaluation
offset past step N does not stop the run from starting: it evaluates at step N instead."""

from __future__ import annotations

import pytest

from lightning_lars.training.recipe_plan import plan_recipe


def stops_early_lines(plan) -> list[str]:
    return [line for line in plan.describe() if "stops early" in line]


def test_a_short_run_follows_the_full_schedule_and_says_so_once():
    full, short = plan_recipe("demo"), plan_recipe("demo", overrides=["trainer.max_steps=20"])
    assert [short.lr(s) for s in range(20)] == [full.lr(s) for s in range(20)]
    assert (short.total_steps, short.planned_steps) == (20, full.total_steps) and short.stops_early
    assert short.decay_end_step == full.decay_end_step and short.eval_steps == [20]
    assert short.describe()[1] == full.describe()[1]  # "312 steps = 8 epochs; ...": the full run
    assert stops_early_lines(short) == [
        f"plan: stops early after step 20 of {full.total_steps} (trainer.max_steps, 0.5128 epochs): LR and"
        " evaluations follow the full schedule, the last evaluation at step 20"
    ]
    assert stops_early_lines(full) == [] and not full.stops_early


def test_a_short_run_keeps_the_evaluations_before_its_stop_and_adds_one_at_it():
    full = plan_recipe("demo")
    stop = full.eval_steps[2] + 5  # past the third evaluation, inside the fourth epoch
    short = plan_recipe("demo", overrides=[f"trainer.max_steps={stop}"])
    assert short.eval_steps == [*full.eval_steps[:3], stop]


def test_a_short_run_of_a_recipe_whose_first_evaluation_comes_later_starts():
    full = plan_recipe("nvidia_mlperf10_3264")
    assert full.eval_steps[0] > 20  # MLPerf's eval offset: the first evaluation after several epochs
    short = plan_recipe("nvidia_mlperf10_3264", overrides=["trainer.max_steps=20"])
    assert short.eval_steps == [20] and short.planned_steps == full.total_steps
    assert [short.lr(s) for s in range(20)] == [full.lr(s) for s in range(20)]


def test_a_recipe_counted_in_steps_keeps_its_own_max_steps():
    """ying_tpu_32k ends at 3558 steps (its max_steps, inside its 92nd epoch): not a short run of 92 epochs."""
    plan = plan_recipe("ying_tpu_32k")
    assert plan.total_steps == plan.planned_steps == 3558 and stops_early_lines(plan) == []


@pytest.mark.parametrize("name", ["ying_tpu_32k", "google_mlperf06_32k", "google_mlperf07_64k"])
def test_a_short_run_of_a_recipe_counted_in_steps_keeps_the_sources_schedule(name):
    """The TF recipes' schedules end at their source's train_steps (scheduler.total_steps), not at whatever
    trainer.max_steps a smoke test gives: the first 20 steps' LR are the full run's, warmup included."""
    full, short = plan_recipe(name), plan_recipe(name, overrides=["trainer.max_steps=20"])
    assert [short.lr(s) for s in range(20)] == [full.lr(s) for s in range(20)]
    # still warming up at step 20: the warmup was not squeezed
    assert full.lr(19) < full.lr(full.warmup_steps)
    assert (short.planned_steps, short.decay_end_step) == (full.total_steps, full.decay_end_step)
    assert short.eval_steps == [20] and len(stops_early_lines(short)) == 1
