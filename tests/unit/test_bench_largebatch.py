"""benchmarks/bench_largebatch.py without training: the large batch from a ratio, the schedule marks moved to a
short run, every arm's composed config, and the resume from kept runs."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from hydra.utils import instantiate

from lightning_lars.config import compose as config
from lightning_lars.config import rules, schema
from lightning_lars.core.errors import UserError
from lightning_lars.report import runs_table

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_largebatch.py"
spec = importlib.util.spec_from_file_location("bench_largebatch", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up there
spec.loader.exec_module(bench)


def fake_prepared(tmp_path: Path, train: int = 5000, val: int = 500, classes: int = 10) -> Path:
    """The manifest `make prepare` writes (lightning_lars/data/prepare.py); the .beton files are not read here."""
    data = tmp_path / "photos"
    data.mkdir()
    splits = {"train": {"num_images": train}, "val": {"num_images": val}}
    (data / "manifest.json").write_text(json.dumps({"num_classes": classes, "splits": splits}))
    return data


@pytest.mark.parametrize(
    ("images", "ratio", "batch"), [(5000, 0.1, 500), (5000, 0.05, 250), (5500, 0.1, 550)]
)
def test_large_batch_is_the_share_of_the_training_images(images, ratio, batch):
    assert bench.large_batch(images, ratio) == batch


@pytest.mark.parametrize(("images", "ratio"), [(5000, 1.5), (5000, 0.5), (100, 0.4), (5000, 0.0001)])
def test_a_ratio_without_three_steps_per_epoch_names_the_largest_that_works(images, ratio):
    with pytest.raises(UserError) as err:
        bench.large_batch(images, ratio)
    message = str(err.value)
    assert "\n" not in message and "largest ratio that works here is" in message
    best = float(message.rsplit(" ", 1)[-1])
    assert images // round(best * images) >= 3  # the named ratio does work ...
    with pytest.raises(UserError):  # ... and the next one up does not
        bench.large_batch(images, best + 0.01)


def test_schedule_marks_scale_with_the_ratio_of_epochs():
    goyal = config.compose_job(["recipe=goyal_8k"])
    marks = dict(m.split("=", 1) for m in bench.scaled_marks(goyal, 9, 10))
    # Goyal sec. 5.1: 5 warmup epochs, /10 at 30, 60, 80 of 90; at 9 epochs a tenth of each
    assert float(marks["scheduler.warmup_epochs"]) == pytest.approx(0.5)
    assert [float(m) for m in marks["scheduler.milestones"].strip("[]").split(",")] == pytest.approx(
        [3, 6, 8]
    )
    assert marks["trainer.max_epochs"] == "9"

    lamb = config.compose_job(["recipe=lamb_32k"])
    marks = dict(m.split("=", 1) for m in bench.scaled_marks(lamb, 10, 20))
    # LAMB's run.sh: warmup 782 of 3519 steps; here 200 steps in all
    assert int(marks["scheduler.warmup_steps"]) == round(782 / 3519 * 200)
    assert int(marks["scheduler.total_steps"]) == 200 and marks["trainer.max_steps"] == "-1"

    neumann = config.compose_job(["recipe=neumann_32k"])
    marks = dict(m.split("=", 1) for m in bench.scaled_marks(neumann, 10, 20))
    # Neumann Table 1: 5 epochs of SGD and a first reset after 10, of 237 epochs (40 steps each at 32000)
    assert int(marks["optimizer.sgd_steps"]) == round(5 / 237 * 200)
    assert int(marks["optimizer.reset_steps"]) == round(10 / 237 * 200)
    assert float(marks["optimizer.momentum_time_unit"]) == pytest.approx(20)  # t of mu(t): still one epoch


@pytest.mark.parametrize("arm", bench.ARMS, ids=lambda a: a.name)
def test_every_arm_composes_with_the_data_sets_classes_and_sizes(arm, tmp_path):
    data = fake_prepared(tmp_path, classes=7)
    recipe = config.compose_job([f"recipe={arm.recipe}"])
    batch = 500 if arm.large else bench.SMALL_BATCH
    cfg = config.compose_job(bench.run_overrides(arm, recipe, batch, 8, data, 7, 0, tmp_path / "out", 32))
    assert cfg.model.num_classes == 7 and cfg.data.train_path == str(data / "train.beton")
    assert cfg.batch.global_size == batch and cfg.trainer.max_epochs == 8
    assert cfg.optimizer._target_ == recipe.optimizer._target_  # the recipe's own optimizer, not a stand-in
    assert cfg.scheduler.base_lr == recipe.scheduler.base_lr  # and its LR, scaled only by the project's rule
    if not arm.large:
        assert cfg.scheduler.warmup_epochs == 0  # Goyal's small-batch baseline has no warmup
    rules.check_keys(cfg)  # every key under the optimizer's schema (a key it would reject fails here)
    instantiate(schema.plain(cfg.optimizer))


def test_kept_runs_are_not_trained_again(tmp_path, capsys):
    data = fake_prepared(tmp_path)
    runs = tmp_path / "runs.jsonl"
    dataset = {"path": str(data), "name": data.name, "train": 5000, "val": 500, "classes": 10}
    for seed in (0, 1):  # small-batch SGD kept from another ratio: it does not depend on the ratio
        row = runs_table.bench_row(
            arm="sgd_small", recipe="goyal_8k", overrides=[], dataset=dataset, ratio=0.05, batch=64, epochs=8,
            resolution=32, seed=seed, top1=[30.0, 40.0 + seed], wall_s=60.0, machine="test", commit="abc",
        )  # fmt: skip
        runs_table.append_run(row, runs)
    before = runs.read_text()
    argv = ["--data", str(data), "--ratio", "0.1", "--seeds", "2", "--epochs", "8", "--only", "sgd_small"]
    bench.main([*argv, "--runs", str(runs), "--no-readme"])
    assert "sgd_small seed 1: kept" in capsys.readouterr().out
    assert runs.read_text() == before


def test_bad_input_is_one_line_naming_the_fix(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--data", str(tmp_path), "--no-readme"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "make prepare" in err
    data = fake_prepared(tmp_path, train=100)
    with pytest.raises(SystemExit):
        bench.main(["--data", str(data), "--ratio", "0.5", "--no-readme"])
    assert "largest ratio that works here is 0.33" in capsys.readouterr().err
