"""Every recipe composes, builds its optimizer and schedule, states its provenance, and stays listed."""

import math
import re

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from lightning_lars.config.paths import RECIPES_DIR
from lightning_lars.recipe import catalog
from tests.unit.recipe_helpers import RECIPES, build_optimizer, build_schedule, recipe

PUBLISHED_KEYS = {"claim", "source", "top1", "time", "epochs", "global_batch", "hardware"}
PUBLISHED_OPTIONAL = {"statistic", "no_target", "epoch_count"}  # lightning_lars.recipe.published
MLPERF = [
    name
    for name in RECIPES
    if "mlperf" in name or name.startswith("resnet_ref_") or name in ("fujitsu_86k", "nado_nesterov_32k")
]
PUBLISHED_RECIPES = {  # the published runs, one recipe each (sources in each recipe's header)
    "goyal_8k",
    "you_alexnet_bn_8k",
    "you_resnet50_32k",
    "resnet50_32k",
    "you_alexnet_32k",
    "akiba_32k",
    "jia_64k",
    "mikami_68k",
    "ying_tpu_32k",
    "google_mlperf06_32k",
    "google_mlperf07_64k",
    "fujitsu_86k",
    "fujitsu_81k",
    "nvidia_mlperf10_3264",
    "nvidia_mlperf06_60k",
    "lamb_32k",
    "nado_nesterov_32k",
}


def test_every_published_run_has_a_recipe():
    assert PUBLISHED_RECIPES <= set(RECIPES), sorted(PUBLISHED_RECIPES - set(RECIPES))


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_composes_and_builds_optimizer_and_schedule(name):
    cfg = recipe(name)
    optimizer = build_optimizer(cfg)
    assert optimizer.param_groups, name
    schedule, peak, steps_per_epoch = build_schedule(cfg)
    total = (
        cfg.trainer.get("max_steps")
        if cfg.trainer.get("max_steps", -1) > 0
        else cfg.trainer.max_epochs * steps_per_epoch
    )
    lrs = [schedule(step) for step in range(0, total + 1, max(1, total // 200))]
    assert all(math.isfinite(lr) and 0.0 <= lr <= peak * 1.000001 for lr in lrs), name
    assert max(lrs) > 0 and len(set(lrs)) > 2, name  # a schedule, not a constant
    # one real step with the LR the schedule gives mid-run
    model = torch.nn.Linear(3, 2)
    optimizer = build_optimizer(cfg, model)
    for group in optimizer.param_groups:
        group["lr"] = schedule(total // 2)
        if "sgd_fraction" in group:
            group["sgd_fraction"] = 0.5  # RMSpropWarmup's blend, set by its callback in a run
    model(torch.randn(4, 3)).square().mean().backward()
    before = model.weight.detach().clone()
    optimizer.step()
    assert not torch.equal(before, model.weight), name


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_states_claim_source_and_reproduce_command(name):
    text = (RECIPES_DIR / f"{name}.yaml").read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert header[0] == "# @package _global_"
    assert any("Source:" in line or "Alias of" in line for line in header), name
    assert f"make recipe={name}" in text
    published = yaml.safe_load(text)["published"]
    assert PUBLISHED_KEYS <= set(published) <= PUBLISHED_KEYS | PUBLISHED_OPTIONAL, name
    assert str(published["global_batch"]).startswith(str(recipe(name).batch.global_size))


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_value_cites_a_source_or_says_our_choice(name):
    """A value line in a recipe body carries a comment, or its block opens with one (continuations)."""
    lines = (RECIPES_DIR / f"{name}.yaml").read_text().splitlines()
    block = None
    for number, line in enumerate(lines, 1):
        top = re.match(r"^(\w+):", line)
        if top:
            block = top.group(1)
            continue
        value = re.match(r"^\s+([\w.]+):\s*(\S.*)$", line)
        if (
            block in ("published", "defaults", "deviations", None)
            or not value
            or value.group(1) == "_target_"
        ):
            continue
        opener = re.match(r"^\s+[\w.]+:\s*#", lines[number - 2])  # `key:  # why` opens a nested value
        assert "#" in line or opener, f"{name}.yaml:{number} has no source or 'our choice': {line.strip()}"


def test_readme_table_is_generated_from_the_recipes():
    assert (RECIPES_DIR / "README.md").read_text() == catalog.markdown(), (
        "recipes/README.md is stale: python -m lightning_lars.recipe.catalog --markdown > recipes/README.md"
    )


def test_alias_composes_to_the_same_run():
    alias, canonical = (OmegaConf.to_container(recipe(n)) for n in ("resnet50_32k", "you_resnet50_32k"))
    alias.pop("recipe_name"), canonical.pop("recipe_name")
    assert alias == canonical


TRAIN_CROPS = {  # (area, aspect) as each submission's code cropped; MLPerf's reference otherwise
    "nvidia_mlperf06_60k": (
        [0.05, 1.0],
        [0.75, 1.3333],
    ),  # run_and_time.sh --min/max-random-area, dali.py aspect
    "nvidia_mlperf10_3264": ([0.05, 1.0], [0.75, 1.3333]),
    "google_mlperf06_32k": ([0.08, 1.0], [0.75, 1.3333]),  # resnet_preprocessing.py _decode_and_random_crop
    "google_mlperf07_64k": (
        [0.08, 1.0],
        [0.75, 1.33],
    ),  # imagenet_input.py crop_image (cached decoded images)
    "fujitsu_86k": ([0.05, 0.9], [0.666667, 1.5]),  # open division: log input_distorted_crop_*_range
}


@pytest.mark.parametrize("name", MLPERF)
def test_mlperf_runs_are_judged_like_mlperf(name):
    cfg = recipe(name)
    assert cfg.callbacks.time_to_target.target_top1 == 75.9
    assert cfg.callbacks.time_to_target.stop_at_target is True
    spec = cfg.evaluation
    # MLPerf: every 4 epochs; the TPU code counts steps; MLCommons' reference points (resnet_ref_*) count
    # epochs to converge at every integer, so those recipes evaluate after every epoch
    every = 1 if name.startswith("resnet_ref_") else 4
    assert spec["every_n_epochs"] == every or spec["every_n_steps"]
    crop = cfg.data.pipeline.train[0].random_resized_crop
    scale, ratio = TRAIN_CROPS.get(name, ([0.05, 1.0], [0.75, 1.33]))
    assert list(crop.scale) == scale and list(crop.ratio) == ratio
    assert cfg.data.pipeline.val[0].center_crop.ratio == pytest.approx(224 / 256)
    assert cfg.data.num_classes == 1000


@pytest.mark.parametrize("name", sorted(set(RECIPES) - set(MLPERF)))
def test_other_runs_report_time_to_their_published_accuracy_without_stopping(name):
    cfg = recipe(name)
    assert cfg.callbacks.time_to_target.stop_at_target is False
    top1 = cfg.published.top1
    if isinstance(top1, (int, float)):
        assert cfg.callbacks.time_to_target.target_top1 == top1


def test_fujitsu_switches_augmentation_off_for_the_last_epochs():
    cfg = recipe("fujitsu_86k")
    assert cfg.data.no_aug_from_epoch == 85 and cfg.trainer.max_epochs == 90


def test_runs_of_ours_table_lists_the_rows_make_check_appends(tmp_path):
    from lightning_lars.check import record_run

    runs = tmp_path / "runs.jsonl"
    row = {
        "recipe": "demo (debug=toy)",
        "hardware": "1 x CPU (2 cores)",
        "epochs": "8",
        "top-1 (mean +- std, n)": "81.90 +- 0.40 %, n=3",
        "time": "257.0 s wall",
        "date": "2026-11-23",
        "log or W&B run": "logs/demo/check/x",
    }
    record_run(row, runs)
    record_run({**row, "date": "2026-11-24"}, runs)
    text = catalog.markdown(runs)
    table = text.split("## Runs of ours", 1)[1]
    assert (
        "| demo (debug=toy) | 1 x CPU (2 cores) | 8 | 81.90 +- 0.40 %, n=3 | 257.0 s wall | 2026-11-23 |"
        in table
    )
    assert table.count("| demo (debug=toy) |") == 2
