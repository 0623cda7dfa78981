"""Every MLPerf recipe's toy run (``debug=toy``: one epoch of 78 steps on the demo data) logs a schedule of the
published shape: ``mlperf.lars_keys``, the function the MLPerf log callback writes its ``*_warmup_epochs`` and
``lars_opt_learning_rate_decay_steps`` with, given the real LARS optimizer and the toy's planned schedule.

The oracle is the full run's plan (`tests/unit/test_golden_mlperf.py` holds it to the sources' logs: decay steps
1254 for NVIDIA v0.6, 13755 for v1.0, 780 for Fujitsu): the toy keeps its warmup-to-decay proportion. Cut at the
toy's one epoch, NVIDIA's schedule once logged a decay of 1 step after a warmup of 2,574 (v0.6) or 156 (v1.0).
"""

from __future__ import annotations

import pytest
from recipe_helpers import build_optimizer, recipe

from lightning_lars.config.recipes import RECIPES_DIR, recipe_names
from lightning_lars.report import mlperf
from lightning_lars.training.recipe_plan import plan_composed

MLPERF_RECIPES = [n for n in recipe_names() if "\nmlperf:" in (RECIPES_DIR / f"{n}.yaml").read_text()]


def logged_schedule(name: str, *overrides: str) -> tuple[dict, int]:
    """The LR keys the recipe's MLPerf log carries (round 1.0's names) and the schedule's warmup in steps."""
    cfg = recipe(name, *overrides)
    schedule = plan_composed(cfg, name).lr_schedule
    return mlperf.lars_keys(build_optimizer(cfg), schedule, "1.0.0"), schedule.warmup_steps


def test_every_mlperf_recipe_is_checked():
    # the five published submissions and the reference points of MLCommons' RCP file
    assert {"nvidia_mlperf06_60k", "nvidia_mlperf10_3264", "fujitsu_86k", "google_mlperf06_32k"} <= set(
        MLPERF_RECIPES
    )
    assert len(MLPERF_RECIPES) >= 14


@pytest.mark.parametrize("name", MLPERF_RECIPES)
def test_toy_log_keeps_the_full_runs_warmup_to_decay_proportion(name):
    full, full_warmup_steps = logged_schedule(name)
    toy, toy_warmup_steps = logged_schedule(name, "debug=toy")
    full_decay, toy_decay = (
        full["lars_opt_learning_rate_decay_steps"],
        toy["lars_opt_learning_rate_decay_steps"],
    )
    assert toy_decay > 1, (name, toy)  # a decay phase, not the clamp's one step
    # decay steps per warmup step: equal up to each run's rounding of its phases to whole steps
    assert toy_decay / toy_warmup_steps == pytest.approx(full_decay / full_warmup_steps, rel=0.02), (
        name,
        full,
        toy,
    )
    # the warmup keeps its epochs where the source counts it in epochs (NVIDIA, Fujitsu, Google's TF epochs)
    if "warmup_epochs" in recipe(name).scheduler:
        assert toy["lars_opt_learning_rate_warmup_epochs"] == pytest.approx(
            full["lars_opt_learning_rate_warmup_epochs"], abs=0.01
        )
    assert toy["lars_opt_end_learning_rate"] < toy["lars_opt_base_learning_rate"]
