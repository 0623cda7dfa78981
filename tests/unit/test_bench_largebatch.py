"""benchmarks/bench_largebatch.py without training: the large batch from a ratio, the schedule marks moved to a
short run, every arm's composed config, and the resume from kept runs."""

import importlib.resources
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import benchmark_script
from hydra.utils import instantiate
from PIL import Image

from lightning_lars.config import rules, schema
from lightning_lars.config.jobs import compose_job
from lightning_lars.core.errors import UserError
from lightning_lars.data.prepare import convert
from lightning_lars.report import bench_key, runs_file, runs_table
from lightning_lars.schedules.scaling import scale_lr

bench = benchmark_script("bench_largebatch")


def tiny_image_tree(root: Path) -> Path:
    """2 classes of 3 random 12 x 16 PNGs each (the same on every call), in train/ and val/: photographs as
    `make prepare` reads them."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label in range(2):
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True)
            for index in range(3):
                Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(
                    folder / f"{index}.png"
                )
    return root


@pytest.fixture(scope="module")
def small_betons(tmp_path_factory) -> Path:
    """Real .beton files of that tree, written by `make prepare`'s own conversion (FFCV's writer)."""
    root = tmp_path_factory.mktemp("betons")
    convert(tiny_image_tree(root / "src"), root / "out", num_workers=1, progress=False)
    return root / "out"


@pytest.fixture
def prepared(small_betons):
    """A data folder as the bench reads it: the manifest `make prepare` writes (lightning_lars/data/prepare.py)
    with the sizes asked for, beside real .beton files (the bench trains on none of them here: only hashes)."""

    def make(where: Path, train: int = 5000, val: int = 500, classes: int = 10, name="photos") -> Path:
        data = where / name
        data.mkdir(parents=True)
        splits = {"train": {"num_images": train}, "val": {"num_images": val}}
        (data / "manifest.json").write_text(json.dumps({"num_classes": classes, "splits": splits}))
        for beton in bench_key.BETONS:
            shutil.copyfile(small_betons / beton, data / beton)
        return data

    return make


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
    goyal = compose_job(["recipe=goyal_8k"])
    marks = dict(m.split("=", 1) for m in bench.scaled_marks(goyal, 9, 10))
    # Goyal sec. 5.1: 5 warmup epochs, /10 at 30, 60, 80 of 90; at 9 epochs a tenth of each
    assert float(marks["scheduler.warmup_epochs"]) == pytest.approx(0.5)
    assert [float(m) for m in marks["scheduler.milestones"].strip("[]").split(",")] == pytest.approx(
        [3, 6, 8]
    )
    assert marks["trainer.max_epochs"] == "9"

    lamb = compose_job(["recipe=lamb_32k"])
    marks = dict(m.split("=", 1) for m in bench.scaled_marks(lamb, 10, 20))
    # LAMB's run.sh: warmup 782 of 3519 steps; here 200 steps in all
    assert int(marks["scheduler.warmup_steps"]) == round(782 / 3519 * 200)
    assert int(marks["scheduler.total_steps"]) == 200 and marks["trainer.max_steps"] == "-1"

    neumann = compose_job(["recipe=neumann_32k"])
    marks = dict(m.split("=", 1) for m in bench.scaled_marks(neumann, 10, 20))
    # Neumann Table 1: 5 epochs of SGD and a first reset after 10, of 237 epochs (40 steps each at 32000)
    assert int(marks["optimizer.sgd_steps"]) == round(5 / 237 * 200)
    assert int(marks["optimizer.reset_steps"]) == round(10 / 237 * 200)
    assert float(marks["optimizer.momentum_time_unit"]) == pytest.approx(20)  # t of mu(t): still one epoch


@pytest.mark.parametrize("arm", bench.ARMS, ids=lambda a: a.name)
def test_every_arm_composes_with_the_data_sets_classes_and_sizes(arm, tmp_path, prepared):
    data = prepared(tmp_path, classes=7)
    recipe = compose_job([f"recipe={arm.recipe}"])
    batch = 500 if arm.large else bench.SMALL_BATCH
    cfg = compose_job(bench.run_overrides(arm, recipe, batch, 8, data, 7, 0, tmp_path / "out", 32))
    assert cfg.model.num_classes == 7 and cfg.data.train_path == str(data / "train.beton")
    assert cfg.batch.global_size == batch and cfg.trainer.max_epochs == 8
    assert cfg.optimizer._target_ == recipe.optimizer._target_  # the recipe's own optimizer, not a stand-in
    if arm.lr_rule == "sqrt":  # the arm's own rule: the recipe's LR times sqrt(batch / its base batch)
        assert cfg.scheduler.base_batch == batch
        want = recipe.scheduler.base_lr * math.sqrt(batch / recipe.scheduler.base_batch)
        assert cfg.scheduler.base_lr == pytest.approx(want, rel=1e-5)
    else:  # its LR, scaled only by the project's rule
        assert cfg.scheduler.base_lr == recipe.scheduler.base_lr
    if not arm.large:
        assert cfg.scheduler.warmup_epochs == 0  # Goyal's small-batch baseline has no warmup
    rules.check_keys(cfg)  # every key under the optimizer's schema (a key it would reject fails here)
    instantiate(schema.plain(cfg.optimizer))


def kept_rows(runs: Path, data: Path, factors: dict, ratio=0.05, arm="sgd_small") -> None:
    dataset = {
        "name": data.name,
        "train": 5000,
        "val": 500,
        "classes": 10,
        "sha256": bench_key.data_hash(data),
    }
    for seed in (0, 1):
        row = runs_file.bench_row(
            arm=arm, recipe="goyal_8k", overrides=[], dataset=dataset, ratio=ratio, batch=64, epochs=8,
            resolution=32, seed=seed, top1=[30.0, 40.0 + seed], wall_s=60.0, machine="test", commit="abc",
            factors=factors,
        )  # fmt: skip
        runs_file.append_run(row, runs)


def test_kept_runs_are_not_trained_again(tmp_path, capsys, prepared):
    data = prepared(tmp_path)
    runs = tmp_path / "runs.jsonl"
    # small-batch SGD kept from another ratio and LR rule: neither changes it
    kept_rows(runs, data, {"width": "quarter", "lr_rule": "sqrt"})
    kept_rows(runs, data, {"width": "full"}, ratio=0.1, arm="lars_mlperf")
    before = runs.read_text()
    argv = ["--data", str(data), "--ratio", "0.1", "--seeds", "2", "--epochs", "8", "--only", "sgd_small"]
    bench.main([*argv, "--runs", str(runs)])
    assert "sgd_small seed 1: kept" in capsys.readouterr().out
    assert runs.read_text() == before
    full = bench_key.RunKey(
        "lars_mlperf", data.name, 0.1, 8, 32, 1, bench_key.data_hash(data), "full", "linear"
    )
    rows = runs_file.read_runs(runs)
    assert any(bench_key.same_run(r, full) for r in rows)
    for other in (
        full._replace(width="quarter"),
        full._replace(lr_rule="sqrt"),
        full._replace(data_hash="0" * 16),
    ):
        assert not any(bench_key.same_run(r, other) for r in rows)  # another cell or other data: trained


def test_a_run_is_kept_only_for_the_same_data_content(tmp_path, prepared):
    one, same = prepared(tmp_path / "a"), prepared(tmp_path / "b")
    assert bench_key.data_hash(one) == bench_key.data_hash(same)  # the folder's place does not count
    # the same images converted again by two writer processes into larger pages: other bytes, the same samples
    src = tiny_image_tree(tmp_path / "src")
    convert(src, again := tmp_path / "again", num_workers=2, page_size=1 << 22, progress=False)
    assert (again / "train.beton").read_bytes() != (one / "train.beton").read_bytes()
    assert bench_key.data_hash(again) == bench_key.data_hash(one)
    # one image's corner inverted (not a least bit, which a JPEG's quantisation may store the same): another
    picture = src / "val" / "class1" / "2.png"
    pixels = np.array(Image.open(picture))
    pixels[:4, :4] ^= 0xFF
    Image.fromarray(pixels).save(picture)
    convert(src, pixel := tmp_path / "pixel", num_workers=1, progress=False)
    assert bench_key.data_hash(pixel) != bench_key.data_hash(one)


def test_rows_of_before_the_factors_read_as_todays_set_up(tmp_path):
    old = json.loads(
        (Path(__file__).resolve().parents[2] / "recipes" / "runs.jsonl").read_text().splitlines()[0]
    )
    assert "factors" not in old and "sha256" not in old["dataset"]  # as the first bench wrote them
    key = bench_key.key_of(old)
    assert (key.width, key.lr_rule, key.data_hash) == ("quarter", "linear", "")


def test_lr_rules_give_the_square_root_and_mlcommons_reference_point(tmp_path, prepared):
    data = prepared(tmp_path)
    mlperf = next(a for a in bench.ARMS if a.name == "lars_mlperf")
    recipe = compose_job([f"recipe={mlperf.recipe}"])

    def lr_of(rule, ratio, batch):
        setup = {"lr_rule": rule, "ratio": ratio}
        cfg = compose_job(bench.run_overrides(mlperf, recipe, batch, 8, data, 10, 0, tmp_path, 32, setup))
        return scale_lr(cfg.scheduler.base_lr, cfg.scheduler.base_batch, cfg.batch.global_size), cfg

    assert lr_of("linear", 0.1, 500)[0] == pytest.approx(10.5 * 500 / 3264)  # NVIDIA's 10.5 at 3264, linearly
    assert lr_of("sqrt", 0.1, 500)[0] == pytest.approx(10.5 * math.sqrt(500 / 3264))
    sqrt_run = bench.run_overrides(mlperf, recipe, 500, 8, data, 10, 0, tmp_path, 32, {"lr_rule": "sqrt"})
    # as a row records it
    assert bench.lr_at_batch(sqrt_run, recipe, 500) == pytest.approx(10.5 * math.sqrt(500 / 3264))
    # 2.5 % of ImageNet's 1,281,167 images is 32,029 per step: MLCommons' entry at 32768, read from the package
    rcps = importlib.resources.files("mlperf_logging.rcp_checker") / "training_4.0.0" / "rcps_resnet.json"
    entry = json.loads(rcps.read_text())["resnet_ref_32768"]["Hyperparams"]
    lr, cfg = lr_of("reference", 0.025, 125)
    assert lr == pytest.approx(entry["opt_base_learning_rate"])  # 21.2: the reference's own, not scaled
    run_epochs = entry["opt_learning_rate_decay_steps"] * 32768 / 1281167
    assert cfg.scheduler.warmup_epochs == pytest.approx(
        entry["opt_learning_rate_warmup_epochs"] / run_epochs * 8, rel=1e-5
    )


def test_the_reference_rule_is_refused_for_arms_without_reference_points(tmp_path, capsys, prepared):
    data = prepared(tmp_path)
    with pytest.raises(SystemExit):
        bench.main(["--data", str(data), "--lr-rule", "reference", "--only", "lars_you"])
    err = capsys.readouterr().err.strip()
    assert (
        "\n" not in err
        and err.startswith("error: lr_rule=reference")
        and 'only="sgd_small lars_mlperf"' in err
    )


def test_bad_input_is_one_line_naming_the_fix(tmp_path, capsys, prepared):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--data", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "make prepare" in err
    data = prepared(tmp_path, train=100)
    with pytest.raises(SystemExit):
        bench.main(["--data", str(data), "--ratio", "0.5"])
    assert "largest ratio that works here is 0.33" in capsys.readouterr().err


def test_one_cell_is_one_command_on_the_named_device_and_width(tmp_path, prepared):
    data = prepared(tmp_path)
    arm = next(a for a in bench.ARMS if a.name == "sgd_small")
    recipe = compose_job([f"recipe={arm.recipe}"])
    setup = {"width": "full", "device": "cuda", "workers": 4}
    cfg = compose_job(bench.run_overrides(arm, recipe, 64, 8, data, 10, 0, tmp_path / "out", 32, setup))
    assert cfg.trainer.accelerator == "gpu" and cfg.data.num_workers == 4
    assert "model_kwargs" not in cfg.model  # timm's resnet10t at its own widths
    quarter = compose_job(bench.run_overrides(arm, recipe, 64, 8, data, 10, 0, tmp_path / "out", 32))
    assert quarter.trainer.accelerator == "cpu" and list(quarter.model.model_kwargs.channels) == [
        16,
        32,
        64,
        128,
    ]


def test_the_square_root_sgd_arm_refuses_another_rule_and_is_left_out_without_only(
    tmp_path, capsys, prepared
):
    data = prepared(tmp_path)
    with pytest.raises(SystemExit):
        bench.main(["--data", str(data), "--lr-rule", "linear", "--only", "sgd_sqrt"])
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "sgd_sqrt trains on the sqrt rule only; run it with --lr-rule sqrt" in err
    sqrt_sgd = next(a for a in bench.ARMS if a.name == "sgd_sqrt")
    goyal = next(a for a in bench.ARMS if a.name == "goyal_sgd")
    recipe = compose_job([f"recipe={goyal.recipe}"])
    # the same recipe at the same batch: only the LR differs, by the square root of the batch ratio
    mine = compose_job(bench.run_overrides(sqrt_sgd, recipe, 500, 8, data, 10, 0, tmp_path, 32))
    linear = compose_job(bench.run_overrides(goyal, recipe, 500, 8, data, 10, 0, tmp_path, 32))
    assert bench.lr_at_batch([], recipe, 500) == pytest.approx(scale_lr(0.1, 256, 500))
    assert mine.scheduler.base_lr * math.sqrt(256 / 500) == pytest.approx(linear.scheduler.base_lr, rel=1e-5)
    assert mine.optimizer == linear.optimizer and mine.batch == linear.batch


def test_a_tuning_trial_holds_out_train_images_scales_the_lr_and_never_joins_a_verdict(tmp_path, prepared):
    data = prepared(tmp_path)
    lamb = next(a for a in bench.ARMS if a.name == "lamb")
    recipe = compose_job([f"recipe={lamb.recipe}"])
    setup = {"lr_rule": "sqrt", "ratio": 0.1, "holdout": 0.1, "holdout_seed": 0, "lr_scale": 2.0}
    trial = compose_job(bench.run_overrides(lamb, recipe, 500, 8, data, 10, 0, tmp_path, 32, setup))
    plain = compose_job(
        bench.run_overrides(lamb, recipe, 500, 8, data, 10, 0, tmp_path, 32, {"lr_rule": "sqrt"})
    )
    assert (trial.data.holdout, trial.data.holdout_seed) == (0.1, 0) and "holdout" not in plain.data
    assert trial.epoch_length.num_train_images == 4500  # 500 of 5000 held out, never trained on
    assert trial.scheduler.base_lr == pytest.approx(2 * plain.scheduler.base_lr, rel=1e-5)
    instantiate(schema.plain(trial.data))  # the data module takes both keys
    # a trial's row is its own set-up, and the verdicts' grouping leaves it out
    kept = runs_file.bench_row(
        arm="lamb", recipe="lamb_32k", overrides=[], dataset={"name": "photos", "train": 5000, "val": 500,
        "classes": 10}, ratio=0.1, batch=500, epochs=8, resolution=32, seed=0, top1=[50.0], wall_s=1.0,
        machine="m", commit="c", factors={"lr_rule": "sqrt", "holdout": {"share": 0.1, "seed": 0}, "lr_scale": 2.0},
    )  # fmt: skip
    key = bench_key.key_of(kept)
    assert (key.holdout, key.lr_scale) == (0.1, 2.0) and not bench_key.same_run(
        kept, key._replace(holdout=0.0)
    )
    assert runs_table.groups([kept]) == {}
