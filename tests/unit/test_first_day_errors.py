"""A new user's first-day mistakes, made as the user made them (``python -m lightning_lars.train ...``,
``lightning-lars --help``, ``make ...``): each is one ``error:`` line with the fix that fits what was given, before
a run folder or a logger exists."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import MAKE, ROOT, TRAIN, assert_hydra_error, assert_one_line_error, run
from omegaconf import OmegaConf
from PIL import Image

from lightning_lars.config import override_keys
from lightning_lars.config.compose import compose_command_line
from lightning_lars.config.jobs import compose_job
from lightning_lars.core.errors import UserError


def entry_point(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    """The entry point run from ``tmp``, as a user runs it from a folder of their own."""
    return run([*TRAIN, *args], cwd=tmp, timeout=300)


def image_folder(root: Path, per_class: int, classes: int = 2) -> Path:
    """``root/{train,val}/<class>/<n>.jpg``: ``per_class`` real 32 px JPEGs per class in each split."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in range(classes):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for n in range(per_class):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{n}.jpg")
    return root


@pytest.mark.parametrize(
    "given, advised",
    [
        # debug=toy already given: its batch plan (ghost BN over 16 images) makes 16 the largest that fits
        (["debug=toy"], "set batch.global_size=16"),
        (["trainer.max_steps=1"], "set batch.global_size=24"),  # the demo's BN over each device's batch
    ],
)
def test_data_smaller_than_one_batch_is_refused_before_any_folder_or_logger(given, advised, tmp_path):
    root = image_folder(tmp_path / "tiny", per_class=12)  # 24 train images
    logs = tmp_path / "logs"
    done = entry_point(
        "recipe=demo",
        *given,
        "data=imagefolder",
        f"data.root={root}",
        "data.num_classes=2",
        f"paths.log_dir={logs}",
        tmp=tmp_path,
    )
    line = assert_one_line_error(done, "the data has 24 training images", "global batch of", advised)
    # no advice to add what was given, nor to swap the user's data for the demo's
    assert "debug=toy" not in line
    assert not logs.exists()  # no run folder, so no W&B folder either
    assert "W&B" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    "key, folder, reason",
    [
        # a virtual file system: no folder can be made in it, even by root
        ("paths.log_dir", "/proc/lightning-lars-logs", "cannot make a folder in /proc"),
        ("paths.log_dir", "{tmp}/a-file/logs", "a-file is a file, not a folder"),
        ("hydra.run.dir", "/proc/my-run", "cannot make a folder in /proc"),
    ],
)
def test_a_log_dir_no_run_folder_can_be_made_in_is_one_line(key, folder, reason, tmp_path):
    (tmp_path / "a-file").write_text("")
    folder = folder.format(tmp=tmp_path)
    root = image_folder(tmp_path / "images", per_class=1)
    done = entry_point(
        "recipe=demo",
        "debug=toy",
        "data=imagefolder",
        f"data.root={root}",
        "data.num_classes=2",
        f"{key}={folder}",
        tmp=tmp_path,
    )
    assert_one_line_error(done, f"{key}={folder}", reason, f"set {key} to a folder you can write")


@pytest.mark.parametrize(
    "text",
    [
        "defaults: [goyal_8k]\nbatch:\n  global_size: 64\n   max_per_device: 32\n",  # indented one too far
        "defaults: [goyal_8k]\nbatch:\n  global_size: [64\n",  # an unclosed list
    ],
)
def test_a_users_recipe_that_is_no_yaml_is_one_line_with_file_line_and_column(text, tmp_path):
    recipe = tmp_path / "conf" / "recipe" / "mine.yaml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(text)
    with pytest.raises(yaml.MarkedYAMLError) as parsed:  # the oracle: yaml's own reading of the file
        yaml.safe_load(text)
    mark = parsed.value.problem_mark
    done = entry_point("recipe=mine", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", tmp=tmp_path)
    assert_one_line_error(done, f"error: {recipe}:{mark.line + 1}:{mark.column + 1}: {parsed.value.problem}")


def printed_config(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return yaml.safe_load(done.stdout)


@pytest.mark.parametrize("name", ["données", "数据", "Ünïcode folder"])
def test_a_non_ascii_path_reaches_the_run_as_typed(name, tmp_path):
    root = tmp_path / name
    args = ["recipe=demo", "debug=toy", "data=imagefolder", f"data.root={root}", "data.num_classes=2"]
    # Hydra itself composes the job's config from the command line (--cfg job prints what the run gets)
    assert printed_config(entry_point(*args, "--cfg", "job", tmp=tmp_path))["data"]["root"] == str(root)
    image_folder(root, per_class=12)  # the checks before Hydra read the same folder: its 24 images
    done = entry_point(*args, f"paths.log_dir={tmp_path / 'logs'}", tmp=tmp_path)
    assert_one_line_error(done, "the data has 24 training images")


@pytest.mark.parametrize("value", ["/runs/epoch=0-step=4.ckpt", "/data/#1", "/data/a~b", "/data/(old)"])
def test_a_value_hydra_reads_only_quoted_is_refused_in_hydras_words_and_the_quoted_form_works(
    value, tmp_path
):
    done = entry_point("recipe=demo", f"data.root={value}", "--cfg", "job", tmp=tmp_path)
    # Hydra's parser, in its words: the character it stopped at, and a link to its grammar
    assert_hydra_error(done, "override_grammar")
    again = entry_point(
        "recipe=demo", "data=imagefolder", f'data.root="{value}"', "--cfg", "job", tmp=tmp_path
    )
    assert printed_config(again)["data"]["root"] == value


def test_help_is_a_usage_screen_in_under_two_seconds_without_hydra_or_torch(tmp_path):
    script = Path(sys.executable).parent / "lightning-lars"  # the console script pip installed
    started = time.perf_counter()
    done = subprocess.run([str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert seconds < 2, f"{seconds:.1f} s"
    screen = done.stdout
    for phrase in ("recipe=NAME", "make recipes", "make recipe-card", "debug=toy", "--hydra-help", "docs: "):
        assert phrase in screen, screen
    for recipe in (ROOT / "recipes").glob("*.yaml"):
        assert recipe.stem in screen
    docs = screen.rpartition("docs: ")[2].strip().split(", ")
    assert docs and all(Path(doc).is_file() for doc in docs), docs
    assert "Powered by Hydra" not in screen and len(screen.splitlines()) < 60  # no template, no config dump
    # nothing heavy imported before the screen: python's own import log of the same command
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "lightning_lars.train", "-h"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    imported = {line.rpartition("|")[2].strip() for line in traced.stderr.splitlines()}
    assert traced.stdout == screen
    assert not {"torch", "hydra", "lightning"} & imported


def test_every_key_the_usage_screen_names_composes(tmp_path):
    screen = entry_point("--help", tmp=tmp_path).stdout
    keys = screen.partition("common keys:\n")[2].partition("\n\n")[0].splitlines()
    placeholders = {
        "DIR": str(tmp_path),
        "G": "1",
        "N": "1",
        "B": "64",
        "M": "32",
        "S": "3",
        "NAME": "imagefolder",
    }
    overrides = []
    for line in keys:
        for override in line.split("  ")[1].split():
            key, _, value = override.partition("=")
            overrides.append(f"{key}={placeholders.get(value, value)}" if value else key)
    assert "debug=toy" in overrides and "run.ckpt_path=last" in overrides and len(overrides) >= 12
    cfg = compose_command_line(["recipe=demo", *overrides])  # the entry point's own composition and checks
    assert cfg.trainer.max_steps == 3 and cfg.batch.global_size == 64 and cfg.data.root == str(tmp_path)
    assert "_target_" not in (cfg.get("logger") or {})  # ~logger: no W&B logger is built (training.run)


def make(*args: str) -> subprocess.CompletedProcess:
    return run([*MAKE, *args])


def test_a_recipe_card_plot_path_with_a_space_says_how_make_splits_args(tmp_path):
    path = tmp_path / "my card.png"
    # as typed: args='--plot .../my card.png'
    done = make("recipe-card", "recipe=demo", f"args=--plot {path}")
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "card.png: no key=value override" in errors[0] and "make passes args to the shell" in errors[0]
    assert "Hydra" not in errors[0] and not path.exists()
    advised = errors[0].partition('args="')[2].partition('" (')[0]  # args="--plot '.../my card.png'"
    assert make("recipe-card", "recipe=demo", f"args={advised}").returncode == 0
    with Image.open(path) as card:
        assert card.format == "PNG"


@pytest.mark.parametrize("recipe", ["demo", "you_resnet50_32k", "google_mlperf07_64k"])
def test_only_a_recipe_of_an_mlperf_round_ends_its_card_with_mlcommons_reference(recipe):
    source = yaml.safe_load((ROOT / "recipes" / f"{recipe}.yaml").read_text())
    assert source["defaults"].count({"override /optimizer": "lars"}) == 1  # all three are LARS recipes
    done = make("recipe-card", f"recipe={recipe}")
    assert done.returncode == 0, done.stderr[-2000:]
    has_round = (source.get("mlperf") or {}).get("round") is not None  # the recipe file itself says
    assert ("MLCommons reference" in done.stdout) == has_round, done.stdout[-1500:]


def test_a_list_with_a_non_ascii_element_is_refused_and_the_quoted_list_works(tmp_path):
    conf = tmp_path / "mes recettes é"
    (conf / "recipe").mkdir(parents=True)
    (conf / "recipe" / "mine.yaml").write_text(
        "# @package _global_\ndefaults: [demo]\nbatch:\n  global_size: 96\n"
    )
    override = f"hydra.searchpath=[file://{conf}]"
    assert_one_line_error(
        entry_point("recipe=mine", override, "--cfg", "job", tmp=tmp_path), f"cannot parse {override}"
    )
    quoted = f'hydra.searchpath=["file://{conf}"]'
    assert printed_config(entry_point("recipe=mine", quoted, "--cfg", "job", tmp=tmp_path))["batch"] == {
        **printed_config(entry_point("recipe=demo", "--cfg", "job", tmp=tmp_path))["batch"],
        "global_size": 96,
    }


def test_a_sweep_over_non_ascii_paths_is_refused_in_hydras_words_and_the_quoted_sweep_expands(tmp_path):
    from hydra.core.override_parser.overrides_parser import OverridesParser  # the test's oracle only

    done = entry_point("-m", "recipe=demo", "data=imagefolder", "data.root=/a/é,/b/ü", tmp=tmp_path)
    assert_hydra_error(done, "data.root=/a/é,/b/ü")
    parser = OverridesParser.create()  # Hydra's own reading of the quoted sweep, job by job as its sweeper
    sweep = parser.parse_override('data.root="/a/é","/b/ü"')
    jobs = [parser.parse_override(f"data.root={value}").value() for value in sweep.sweep_string_iterator()]
    assert sweep.is_sweep_override() and jobs == ["/a/é", "/b/ü"]


@pytest.mark.parametrize(
    "recipe, key",
    [
        ("demo", "data.pipeline.train"),
        ("demo", "data.pipeline.val"),
        ("goyal_8k", "deviations"),
        ("goyal_8k", "scheduler.milestones"),
        ("lamb_32k", "optimizer.betas"),
        ("akiba_32k", "scheduler.boundaries"),
        ("akiba_32k", "scheduler.multipliers"),
    ],
)
def test_a_key_inside_a_list_that_is_no_index_is_one_line_naming_both_ways_and_an_index_composes(recipe, key):
    """Hydra applies ``LIST.name=...`` with OmegaConf's ``update``, which raises a bare ValueError (a traceback);
    our check, from the schema's list types, says it in one line, and ``LIST.0=...`` still composes."""
    given = [f"recipe={recipe}", "debug=toy"] if recipe == "demo" else [f"recipe={recipe}"]
    current = compose_command_line(given)
    assert key in override_keys.list_keys() and OmegaConf.is_list(OmegaConf.select(current, key))
    with pytest.raises(ValueError, match="invalid literal for int"):  # Hydra alone: not our words
        compose_job([*given, f"{key}.flip=1"])
    with pytest.raises(UserError) as refused:
        compose_command_line([*given, f"{key}.flip=1"])
    message = str(refused.value)
    assert "\n" not in message and f"{key} is a list" in message
    assert f"({key}.0=...)" in message and f"({key}=[...]" in message
    item = f"{key}.0"  # an item that is a mapping: its first key, as data.pipeline.train.0.center_crop
    while OmegaConf.is_dict(OmegaConf.select(current, item)):
        item += "." + next(iter(OmegaConf.select(current, item)))
    first = OmegaConf.select(current, item)
    value = first if isinstance(first, int | float) else "'" + str(first).replace("'", "") + "'"
    again = compose_command_line([*given, f"{item}={value}"])
    assert OmegaConf.select(again, item) == first


def test_the_entry_point_refuses_a_key_inside_a_list_in_one_line_before_any_run_folder(tmp_path):
    done = entry_point("recipe=demo", "debug=toy", "data.pipeline.train.flip=false", tmp=tmp_path)
    assert_one_line_error(done, "data.pipeline.train is a list", "data.pipeline.train.0=...")
    assert not (tmp_path / "logs").exists()


def test_a_sweep_whose_first_job_is_refused_leaves_no_sweep_folder(tmp_path):
    """Hydra's launcher makes the sweep folder, writes multirun.yaml and job 0's folder before job 0 runs; the
    refusal takes all of it back, as a single run's refusal takes back its run folder."""
    logs = tmp_path / "logs"
    done = entry_point("recipe=demo", f"paths.log_dir={logs}", "-m", "scheduler.base_lr=-1,-2", tmp=tmp_path)
    assert_one_line_error(done, "scheduler.base_lr=-1: a learning rate must be > 0", alone=False)
    assert "#0 : " in done.stdout + done.stderr  # Hydra launched the sweep: its folder was made
    assert not logs.exists()
