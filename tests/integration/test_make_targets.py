"""The make targets as a user types them: a recipe of the user's own (with its package line, and one
without it) in a folder whose path holds a space, overrides and ``args=...`` reaching the program whole,
environment variables given as make variables."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import MAKE, entry_point_env, run

from lightning_lars.config.jobs import compose_job
from lightning_lars.config.paths import CONF_DIR

pytestmark = pytest.mark.slow


def make(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return run([*MAKE, *args], cwd=cwd, env=entry_point_env(**env), timeout=600)


def test_recipe_card_of_a_users_recipe_with_overrides_and_a_plot_in_a_folder_with_a_space(tmp_path):
    conf = tmp_path / "my conf"
    (conf / "recipe").mkdir(parents=True)
    # a delta over ours, as the README describes it: the `# @package _global_` line, then the changes
    (conf / "recipe" / "my_run.yaml").write_text(
        "# @package _global_\ndefaults: [goyal_8k]\noptimizer: {momentum: 0.8}\n"
    )
    plot = tmp_path / "my plots" / "card.png"
    plot.parent.mkdir()
    done = make(
        "recipe-card",
        "recipe=my_run",
        f"hydra.searchpath=[file://{conf}]",
        "optimizer.momentum=0.85",  # the command line wins over the user's recipe
        f"args=--plot {shlex.quote(str(plot))}",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    header = next(line for line in done.stdout.splitlines() if line.strip().startswith("step"))
    first = next(line for line in done.stdout.splitlines() if line.strip().startswith("first update"))
    momentum = first.split()[2:][header.split().index("momentum")]  # after the label "first update"
    assert momentum == "0.85", done.stdout
    assert "global batch 8192" in done.stdout  # goyal_8k's, through the user's defaults
    assert f"plot: {plot}" in done.stdout and plot.stat().st_size > 10_000


def test_train_takes_a_users_recipe_and_names_the_package_line_it_lacks(tmp_path):
    conf = tmp_path / "my conf"
    (conf / "recipe").mkdir(parents=True)
    recipe = conf / "recipe" / "mine.yaml"
    recipe.write_text("defaults: [demo]\nseed: 321\nbatch: {global_size: 96}\n")
    # without the line Hydra would put the keys under `recipe`: refused in one line that names the fix
    done = make("recipe=mine", f"hydra.searchpath=[file://{conf}]", "args=--cfg job", cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and "# @package _global_" in errors[0] and str(recipe) in errors[0], done.stderr
    recipe.write_text("# @package _global_\n" + recipe.read_text())
    done = make("recipe=mine", f"hydra.searchpath=[file://{conf}]", "args=--cfg job", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\nseed: 321\n" in done.stdout and "global_size: 96" in done.stdout, done.stdout


def test_make_passes_an_upper_case_variable_as_the_environment_variable(tmp_path):
    data = tmp_path / "my data"  # no prepared files there: the error names the folder the run looked in
    done = make("recipe=demo", f"LARS_DATA_DIR={data}", f"paths.log_dir={tmp_path / 'logs'}", cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and f"{data}/demo/train.beton not found" in errors[0], done.stderr
    assert not (tmp_path / "logs").exists()


def test_make_demo_data_writes_into_a_folder_with_a_space(tmp_path):
    out = tmp_path / "my data" / "demo"
    done = make(
        "demo-data", f"out={out}", "args=--train-per-class 4 --val-per-class 2 --workers 1", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "train.beton").stat().st_size > 0 and (out / "val.beton").stat().st_size > 0
    assert not (tmp_path / "my").exists()  # not split at the space


def job_config(done: subprocess.CompletedProcess) -> dict:
    """The YAML that ``--cfg job`` printed, after the command line make echoes."""
    assert done.returncode == 0, done.stderr[-3000:]
    return yaml.safe_load(done.stdout.split("\n", 1)[1])


def test_a_config_group_and_its_keys_reach_the_program_through_make(tmp_path):
    """`data=` was a make variable of bench-largebatch: make kept it, and the run used the recipe's data."""
    synthetic = job_config(make("recipe=goyal_8k", "data=synthetic", "args=--cfg job", cwd=tmp_path))
    assert synthetic["data"]["_target_"] == "lightning_lars.data.synthetic.SyntheticDataModule"
    root = tmp_path / "my imagenet"
    folder = job_config(
        make("recipe=goyal_8k", "data=imagefolder", f"data.root={root}", "args=--cfg job", cwd=tmp_path)
    )
    assert folder["data"]["_target_"].endswith("TorchvisionDataModule") and folder["data"]["root"] == str(
        root
    )


def test_no_make_variable_is_a_key_or_group_of_the_config(tmp_path):
    """What make keeps for itself never reaches Hydra: none of its variables may name a config key or group
    (``recipe`` is the exception make passes on itself). The variables as make itself reads the Makefile."""
    database = subprocess.run(
        [*MAKE, "-pn", "help"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    (line,) = [ln for ln in database.splitlines() if ln.startswith("MAKE_VARS := ")]
    own = set(line.removeprefix("MAKE_VARS := ").split()) - {"recipe"}
    cfg = compose_job(["recipe=demo"])
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()} | {"recipe", "local", "debug"}
    assert own and not own & (set(cfg.keys()) | groups), own & (set(cfg.keys()) | groups)
