"""MLCommons' reference convergence points: one recipe per entry of the installed RCP file, each value equal to
the entry's, and the recipe card's numbers equal to what the file and MLCommons' own RCP checker say.

The oracle is ``mlperf_logging/rcp_checker/training_4.0.0/rcps_resnet.json`` as the mlperf-logging package
installs it (read here with importlib.resources, not through our module), the checker's documented statistics
(the mean without the fastest and the slowest run, the population stdev of all) and its pruned points.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import statistics
import subprocess
import sys

import numpy as np
import pytest
from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

from lightning_lars.config.paths import RECIPES_DIR
from lightning_lars.recipe import reference_points
from lightning_lars.recipe_card import show
from lightning_lars.training.recipe_plan import plan_recipe
from tests.helpers import assert_one_line_error
from tests.unit.recipe_helpers import IMAGENET_TRAIN_IMAGES as N
from tests.unit.recipe_helpers import RECIPES, recipe


def _file(ruleset: str) -> dict:
    path = importlib.resources.files("mlperf_logging.rcp_checker") / f"training_{ruleset}/rcps_resnet.json"
    return json.loads(path.read_text())


RCPS = _file("4.0.0")
EARLIER = _file("1.0.0")  # the first RCP ruleset: some decay lengths written in epochs


def stats(epochs: list[int]) -> tuple[float, float]:
    """The checker's mean (one fastest and one slowest run left out) and its np.std (population) of all runs."""
    ordered = sorted(epochs)
    return statistics.mean(ordered[1:-1]), statistics.pstdev(ordered)


def decay_comment(name: str) -> str:
    """The ``# decay:`` comment of recipe ``name``, where it says how it reads its entry's decay steps."""
    text = (RECIPES_DIR / f"{name}.yaml").read_text()
    return text[text.index("# decay:") : text.index("\nscheduler:")]


def test_one_recipe_per_entry():
    assert {n for n in RECIPES if n.startswith("resnet_ref_")} == set(RCPS)
    assert len(RCPS) == 10 and {e["BS"] for e in RCPS.values()} >= {1632, 67840}


@pytest.mark.parametrize("name", sorted(RCPS))
def test_recipe_values_are_the_entry(name):
    entry, cfg = RCPS[name], recipe(name)
    hp, batch = entry["Hyperparams"], entry["BS"]
    assert name == f"resnet_ref_{batch}" and hp["optimizer"] == "lars"
    assert cfg.optimizer._target_.endswith(".LARS")
    assert cfg.batch.global_size == batch
    assert cfg.batch.bn_group == hp["model_bn_span"] == cfg.batch.max_per_device
    assert cfg.scheduler.base_lr == hp["opt_base_learning_rate"] and cfg.scheduler.base_batch == batch
    assert cfg.optimizer.momentum == hp["opt_momentum"]
    assert cfg.optimizer.weight_decay == hp["opt_weight_decay"]
    assert cfg.optimizer.eps == hp.get("epsilon", 0)
    assert cfg.scheduler.end_lr == hp.get("opt_end_learning_rate", 1e-4)
    assert cfg.scheduler.power == hp.get("opt_learning_rate_decay_poly_power", 2)
    steps_per_epoch = N // batch  # the reference drops the remainder
    warmup = cfg.scheduler.warmup_steps
    assert warmup == hp["opt_learning_rate_warmup_epochs"] * steps_per_epoch
    # the reference's train_steps T: its PolynomialDecay ends at warmup + (T - warmup + 1) = total_steps
    train_steps = cfg.scheduler.total_steps - 1
    written = hp["opt_learning_rate_decay_steps"]
    as_decay = written == train_steps - warmup + 1
    converted = train_steps // steps_per_epoch * N / batch  # epochs converted with N / B: the file
    as_epochs = train_steps % steps_per_epoch == 0 and written in (  # rounds (4096) and truncates (32768)
        round(converted),
        math.floor(converted),
        train_steps,  # epochs of N // B steps
    )
    assert as_decay or as_epochs, (written, train_steps, warmup)
    # MLCommons' reference (mlcommons/training image_classification/tensorflow2 lars_util.py:112-116 with
    # resnet_runnable.py:111-114 and common.py:637-639) logs int((N // B) x train_epochs - warmup_steps + 1):
    # where a whole train_epochs gives the entry's value, it is that run's decay length and is read as written;
    # elsewhere the recipe's decay comment says why not (and names no other entry's command)
    logged_for = [e for e in range(1, 400) if int(e * steps_per_epoch - warmup + 1) == written]
    block = decay_comment(name)
    if logged_for:
        assert as_decay and train_steps == logged_for[0] * steps_per_epoch, (name, logged_for)
    else:
        need = (written - 1 + warmup) / steps_per_epoch
        assert f"{written} is no decay length MLCommons' reference logs" in block
        assert f"= {need:.3f} train epochs, not a whole number" in block
    assert name == "resnet_ref_4096" or "resnet_ref_4096" not in block  # once copied into four recipes
    earlier = EARLIER.get(name, {}).get("Hyperparams", {}).get("opt_learning_rate_decay_steps")
    if earlier is not None and earlier != written:  # training_1.0.0 wrote this entry in epochs: of the run,
        assert earlier * steps_per_epoch in (train_steps, train_steps - warmup)  # or of its decay
    plan = plan_recipe(name)
    assert plan.steps_per_epoch == steps_per_epoch and plan.warmup_steps == warmup
    assert plan.total_epochs >= max(entry["Epochs to converge"])  # the slowest run's epoch is reached
    assert cfg.callbacks.time_to_target.target_top1 == 75.9 == cfg.published.top1
    assert cfg.published.global_batch == batch
    mean, stdev = stats(entry["Epochs to converge"])
    assert cfg.published.epochs == f"{mean:.4g} +- {stdev:.3g} (n={len(entry['Epochs to converge'])})"


def test_published_statistics_are_the_checkers():
    """What the project states for each entry (the recipe's published epochs, the card's reference point) is the
    checker's own RCP Mean, Stdev and Min Epochs (``RCP_Checker.rcp_data``), and the checker's documented
    statistics (`stats`) give the same numbers from the file."""
    checker = RCP_Checker("training", "4.0.0", "resnet", verbose=False)
    for name, entry in RCPS.items():
        record, runs = checker.rcp_data[name], entry["Epochs to converge"]
        assert recipe(name).published.epochs == (
            f"{record['RCP Mean']:.4g} +- {record['RCP Stdev']:.3g} (n={len(runs)})"
        )
        point = reference_points.reference_point(name)
        assert (point.mean_epochs, point.stdev_epochs, point.min_epochs) == (
            record["RCP Mean"], record["RCP Stdev"], record["Min Epochs"]
        )  # fmt: skip
        assert point.batch == entry["BS"] and point.epochs_to_converge == tuple(runs)
        mean, stdev = stats(runs)
        assert record["RCP Mean"] == pytest.approx(mean) and record["RCP Stdev"] == pytest.approx(stdev)


@pytest.mark.parametrize("name", sorted(RCPS))
def test_card_shows_the_entry_and_its_decay_steps_both_ways(name):
    entry = RCPS[name]
    hp, batch, epochs = entry["Hyperparams"], entry["BS"], entry["Epochs to converge"]
    text = show(name)
    mean, stdev = stats(epochs)
    assert f"over {len(epochs)} runs: mean {mean:.4g}" in text
    assert f"stdev {stdev:.3g}, range {min(epochs)}-{max(epochs)}" in text
    written = hp["opt_learning_rate_decay_steps"]
    assert f"as written: {written} steps = {written / (N / batch):.3f} epochs of N/B" in text
    assert f"{written / (N // batch):.3f} epochs of N // B" in text
    earlier = EARLIER.get(name, {}).get("Hyperparams", {}).get("opt_learning_rate_decay_steps")
    if earlier is not None and earlier != written:
        assert f"training_1.0.0 wrote this entry's value as {earlier} (epochs)" in text


def _entry_at(batch: int) -> str:
    return next(name for name, entry in RCPS.items() if entry["BS"] == batch)


def test_card_of_a_lars_recipe_shows_the_reference_interpolated_at_its_batch():
    """google_mlperf07_64k (65536): between the nearest entries the checker keeps after pruning."""
    kept = RCP_Checker("training", "4.0.0", "resnet", verbose=False).pruned_rcp_data
    kept_batches = sorted(RCPS[name]["BS"] for name in kept)
    low = max(b for b in kept_batches if b < 65536)
    high = min(b for b in kept_batches if b > 65536)
    (low_mean, _), (high_mean, _) = (stats(RCPS[_entry_at(b)]["Epochs to converge"]) for b in (low, high))
    expected = float(np.interp(65536, [low, high], [low_mean, high_mean]))
    text = show("google_mlperf07_64k")
    assert f"interpolated between {_entry_at(low)} and {_entry_at(high)}" in text
    assert f"epochs to 75.9 % at batch 65536: reference {expected:.4g}" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("peak LR"))
    low_lr, high_lr = (RCPS[_entry_at(b)]["Hyperparams"]["opt_base_learning_rate"] for b in (low, high))
    assert row.split()[2:] == ["24.699", f"{low_lr:.6g}", f"{high_lr:.6g}"]


def test_card_at_an_entrys_batch_shows_that_entry():
    epochs = RCPS["resnet_ref_3264"]["Epochs to converge"]
    mean, _ = stats(epochs)
    text = show("nvidia_mlperf10_3264")
    assert "resnet_ref_3264, the entry at this batch" in text
    assert f"epochs to 75.9 % at batch 3264: reference {mean:.4g}" in text


def test_card_of_a_recipe_without_lars_has_no_reference():
    assert "MLCommons reference" not in show("goyal_8k")


def test_unknown_reference_point_is_one_line_listing_those_that_exist():
    done = subprocess.run(
        [sys.executable, "-m", "lightning_lars.recipe_card", "resnet_ref_9999"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_one_line_error(done, "resnet_ref_9999", *sorted(RCPS))


def test_card_below_and_above_every_entry_says_what_the_checker_does():
    """Below the smallest batch the checker judges against the smallest entry; above the largest it has none."""
    smallest = min(RCPS, key=lambda name: RCPS[name]["BS"])
    largest = max(entry["BS"] for entry in RCPS.values())
    below = show("demo", overrides=["mlperf.round=4.0.0"])  # LARS at batch 128, as an MLPerf run
    assert f"below every entry: the checker holds a run at this batch to {smallest}" in below
    mean, _ = stats(RCPS[smallest]["Epochs to converge"])
    assert f"at batch 128: reference {mean:.4g}" in below
    above = show("google_mlperf07_64k", overrides=[f"batch.global_size={largest + 4096}"])
    assert "above every entry: the checker asks a submission at this batch for a new RCP" in above


def test_card_at_a_pruned_entrys_batch_says_the_checker_prunes_it():
    kept = RCP_Checker("training", "4.0.0", "resnet", verbose=False).pruned_rcp_data
    name = next(n for n in sorted(RCPS) if n not in kept)
    batch = RCPS[name]["BS"]
    text = show(name)
    assert f"MLCommons reference at global batch {batch}" in text
    assert f"({name} converges slower than that line: the checker prunes it)" in text


def test_card_of_a_lars_recipe_without_mlperf_logging_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(reference_points, "RCP_PACKAGE", "no_mlperf_logging_here")
    reference_points.entries.cache_clear()
    try:
        text = show("google_mlperf07_64k")
    finally:
        monkeypatch.undo()
        reference_points.entries.cache_clear()
    assert "Plan on 1 device(s)" in text
    assert "MLCommons reference at this batch: not shown" in text and "pip install mlperf-logging" in text
