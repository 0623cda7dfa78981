"""A new user's mistakes on the command line, made the way a user makes them (``python -m lightning_lars.train
...`` and ``make ...``): no traceback, before torch, Lightning or FFCV are imported; a mistake only we can see is
exit code 2 and one ``error:`` line naming the fix, one that Hydra or OmegaConf refuse while composing is in their
own words (exit code 1). Each config mistake's message is tested in process in tests/unit/test_schema.py; here, what
only the real command shows. Mistakes that need the heavy stack (a model name, an accelerator, a checkpoint's
config) are in tests/integration/test_first_hour.py.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import MAKE, TRAIN, assert_hydra_error, assert_one_line_error, run

from lightning_lars import check
from lightning_lars.config.compose import compose_command_line
from lightning_lars.core.errors import UserError


def entry_point(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    return run([*TRAIN, f"paths.log_dir={tmp / 'logs'}", *args], timeout=300)


@pytest.mark.parametrize(
    "args, phrases",
    [
        # a recipe's name as a user mistypes it: dashes, capitals, the file's path (the oracle: recipes/goyal_8k.yaml)
        (["recipe=goyal-8k"], ["unknown recipe 'goyal-8k'; did you mean recipe=goyal_8k?", "make recipes"]),
        (["recipe=Goyal_8k"], ["unknown recipe 'Goyal_8k'; did you mean recipe=goyal_8k?"]),
        (["recipe=recipes/goyal_8k.yaml"], ["'recipes/goyal_8k.yaml'; did you mean recipe=goyal_8k?"]),
        (["recipe=zzz"], ["unknown recipe 'zzz'; known recipes: akiba_32k, demo"]),  # nothing close: no guess
        (
            ["trainer.max_epochs=abc"],
            ["trainer.max_epochs=abc: expected an integer"],
        ),  # the rules, end to end
        # a dataset folder of the user's own: the error names the command that writes that folder
        (
            ["paths.data_dir=/nonexistent/mydata"],
            ["/nonexistent/mydata/demo/train.beton not found", "make demo-data out=/nonexistent/mydata/demo"],
        ),
        (
            ["debug=toy", "paths.data_dir=/nonexistent/mydata"],  # the toy reads the demo's JPEG tree
            [
                "image folder /nonexistent/mydata/demo/jpeg/train not found",
                "make demo-data out=/nonexistent/mydata/demo",
            ],
        ),
        (
            ["recipe=fujitsu_86k", "data=imagefolder", "data.root=/nonexistent"],
            ["data.no_aug_from_epoch=85", "needs the FFCV loader", "data.no_aug_from_epoch=null"],
        ),
    ],
)
def test_wrong_values_are_one_line_before_anything_is_built(args, phrases, tmp_path):
    assert_one_line_error(entry_point(*args, tmp=tmp_path), *phrases)


def test_a_type_the_schema_refuses_is_in_omegaconfs_words(tmp_path):
    """The oracle: OmegaConf's own message for the schema's integer field, and Hydra's for the override."""
    assert_hydra_error(
        entry_point("batch.global_size=abc", tmp=tmp_path),
        "Error merging override batch.global_size=abc",
        "Value 'abc' of type 'str' could not be converted to Integer",
        "full_key: batch.global_size",
    )


def test_the_same_mistakes_through_make(tmp_path):
    for args, phrase in (
        (["recipe=goyal8k"], "unknown recipe 'goyal8k'"),
        (["trainer.max_epochs=abc"], "trainer.max_epochs=abc: expected an integer"),
    ):
        done = run([*MAKE, *args, f"paths.log_dir={tmp_path}"], timeout=300)
        assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done.stderr[-2000:]
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and phrase in errors[0], done.stderr  # make adds only its own "Error 2" line


HEAVY = ("torch", "lightning", "timm", "ffcv", "wandb")
IMPORTS_AFTER = f"""import runpy, sys
sys.argv = ["lightning_lars.train", *sys.argv[1:]]
try:
    runpy.run_module("lightning_lars.train", run_name="__main__")
except SystemExit as stop:
    print("exit", stop.code, "heavy:", *sorted(m for m in {HEAVY!r} if m in sys.modules))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["recipe=goyal8k"],
        ["trainer.max_epochs=abc"],
        ["scheduler.base_lr=abc"],
        ["batch.max_per_device=0"],
        ["recipe=goyal_8k", "seed=-3"],
        ["paths.data_dir=/nonexistent"],
        ["debug=toy", "paths.data_dir=/nonexistent"],
        ["trainer.max_step=1"],
        ["callbacks.checkpoint.every_n_train_step=5"],
        ["epoch_length.mode=ragged"],
        ["+run.resume=true"],
    ],
)
def test_command_line_mistakes_are_found_before_the_heavy_stack_is_imported(args, tmp_path):
    """These errors cost about a second because torch, Lightning, timm, FFCV and W&B (~10 s on 2 cores) are
    imported only after Hydra composed the job and the checks at the top of the task function passed: our own
    mistakes exit 2 with one ``error:`` line, Hydra's exit 1 in its words."""
    done = run([sys.executable, "-c", IMPORTS_AFTER, f"paths.log_dir={tmp_path}", *args], timeout=300)
    ours = done.stderr.startswith("error: ") and done.stdout.strip() == "exit 2 heavy:"
    hydras = "HYDRA_FULL_ERROR" in done.stderr and done.stdout.strip() == "exit 1 heavy:"
    assert (ours or hydras) and "Traceback" not in done.stderr, done.stdout + done.stderr


def test_trainer_arguments_without_plus_reach_the_trainer_through_the_entry_point(tmp_path):
    """As typed: ``trainer.max_steps=1 trainer.limit_val_batches=1`` compose without ``+`` (conf/trainer sets
    both to Lightning's defaults); ``--cfg job`` prints the job's config, so no data or training is needed."""
    done = entry_point("trainer.max_steps=1", "trainer.limit_val_batches=1", "--cfg", "job", tmp=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    trainer = yaml.safe_load(done.stdout)["trainer"]
    assert trainer["max_steps"] == 1 and trainer["limit_val_batches"] == 1


def test_a_trainer_argument_the_config_does_not_set_takes_hydras_plus():
    """Hydra's struct mode: a key the config lacks needs ``+``, in Hydra's words; with it the key reaches
    Lightning's ``Trainer(...)``, which judges it (tests/unit/test_one_composition.py)."""
    with pytest.raises(UserError, match=r"To append to your config use \+trainer.max_step=1"):
        compose_command_line(["trainer.max_step=1"])
    cfg = compose_command_line(["+trainer.enable_model_summary=true", "debug=toy", "trainer.max_steps=2"])
    assert cfg.trainer.enable_model_summary is True and cfg.trainer.max_steps == 2


def test_the_demo_recipe_has_a_target_for_make_check():
    target, source = check.target_of(compose_command_line(["recipe=demo"]))
    assert (target, source) == (70.0, "callbacks.time_to_target.target_top1")


@pytest.mark.parametrize("flag", ["-m", "--multirun", "hydra.mode=MULTIRUN"])
def test_a_sweep_is_checked_job_by_job_in_every_form_hydra_takes(flag, tmp_path):
    """Each job of a sweep is composed, and checked, as it starts: the first job (seed=x) is refused in
    OmegaConf's words before anything trains."""
    done = entry_point(flag, "recipe=demo", "seed=x,0", "batch.global_size=16,32", tmp=tmp_path)
    assert_hydra_error(
        done, "Error merging override seed=x", "Value 'x' of type 'str' could not be converted"
    )


def test_a_sweep_without_multirun_names_the_flag(tmp_path):
    assert_hydra_error(entry_point("seed=0,1", tmp=tmp_path), "seed=0,1", "add --multirun")


def test_a_sweep_cannot_be_printed(tmp_path):
    assert_one_line_error(entry_point("-m", "seed=0,1", "--cfg", "job", tmp=tmp_path), "--cfg job")


def test_make_passes_multirun_and_the_sweep(tmp_path):
    done = run([*MAKE, "recipe=demo", "multirun=1", "seed=x,0", f"paths.log_dir={tmp_path}"], timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done.stderr[-2000:]
    command = shlex.split(done.stdout)  # make echoes the command it runs, each override shell-quoted
    assert "--multirun" in command and "seed=x,0" in command, done.stdout
    # the sweep's first job, in Hydra's words
    assert "Error merging override seed=x" in done.stderr, done.stderr


@pytest.mark.parametrize("reader", ["head -1", "true"])  # true: gone before the first write, every time
@pytest.mark.parametrize(
    "command, first_line",
    [
        ([*TRAIN, "--help"], "usage: lightning-lars recipe=NAME [key=value ...] [--cfg job]"),
        ([sys.executable, "-m", "lightning_lars.recipe.catalog"], "recipe"),
    ],
)
def test_a_reader_that_stops_early_gets_no_traceback(command, first_line, reader):
    """`lightning-lars --help | head` and `make recipes | head`: a closed pipe ends the program quietly."""
    pipeline = f"{shlex.join(command)} | {reader}"
    done = run(["bash", "-o", "pipefail", "-c", pipeline])
    assert done.stderr == "", done.stderr[-2000:]
    if reader == "head -1":
        assert done.stdout.split()[0] == first_line.split()[0] and done.stdout.startswith(first_line)


def test_the_recipe_card_guesses_a_mistyped_recipe_too():
    done = run([sys.executable, "-m", "lightning_lars.recipe_card", "nvidia-mlperf10-3264"], timeout=300)
    assert_one_line_error(done, "unknown recipe 'nvidia-mlperf10-3264'; did you mean 'nvidia_mlperf10_3264'?")
