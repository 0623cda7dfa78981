"""`debug=toy` runs every recipe's model: the toy image size is the demo's 32 px or the smallest the
model takes (AlexNet-BN pools 32 px images to 0x0), judged by running the real model, not by a table."""

import pytest
import timm
import torch
from hydra import compose, initialize_config_dir

import lightning_lars.models  # noqa: F401  (the ${at_least_model_min:} resolver the toy config reads)
from lightning_lars.config.jobs import compose_job
from lightning_lars.config.paths import CONF_DIR
from lightning_lars.config.recipes import recipe_names
from lightning_lars.recipe.plan import make_plan


def toy_config(recipe):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=[f"recipe={recipe}", "debug=toy"])


def runs_at(arch, pixels):
    model = timm.create_model(arch, num_classes=10).eval()
    try:
        with torch.no_grad():
            model(torch.zeros(2, 3, pixels, pixels))
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("recipe", recipe_names())
def test_toy_size_fits_every_recipe_model(recipe):
    cfg = toy_config(recipe)
    size = cfg.data.resolution
    assert cfg.data.val_resolution == size and size >= 32
    if size > 32:  # raised for this model: the size below it must really fail, the chosen one really run
        assert runs_at(cfg.model.arch, size) and not runs_at(cfg.model.arch, size - 1)


def test_alexnet_recipes_get_63_px_and_resnets_keep_32():
    assert toy_config("you_alexnet_bn_8k").data.resolution == 63
    assert toy_config("you_alexnet_32k").data.resolution == 63
    assert toy_config("goyal_8k").data.resolution == 32


def test_toy_reads_the_demo_images_without_ffcv_and_data_demo_puts_ffcv_back():
    toy = toy_config("demo")
    assert toy.data._target_.endswith("TorchvisionDataModule") and toy.data.root.endswith("/demo/jpeg")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        ffcv = compose("train", overrides=["recipe=demo", "debug=toy", "data=demo"])
    assert ffcv.data._target_.endswith("FFCVDataModule")
    for key in ("num_classes", "resolution", "val_resolution", "pipeline", "prepare_command"):
        # the same images, classes and ops: only the loader differs
        assert toy.data[key] == ffcv.data[key], key


@pytest.mark.parametrize("recipe", ["fujitsu_86k", "goyal_8k"])
def test_toy_composes_for_the_image_folder_loader(recipe):
    """Fujitsu's no_aug_from_epoch is FFCV-only: the toy config clears it (its epoch 85 is past 3 steps)."""
    from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule

    data = toy_config(recipe).data
    kwargs = {k: v for k, v in data.items() if k not in ("_target_", "root")}
    TorchvisionDataModule(root="unused", **kwargs)  # every key the toy passes is one the loader takes


def test_toy_batches_equal_ffcvs_on_the_same_demo_data(tmp_path):
    """Oracle: FFCV's own loader over the demo's .beton files. The toy's torchvision loader over the demo's JPEG
    tree must give the same validation images, labels and order (both read data/val_order.py's permutation)."""
    from lightning_lars.data.demo import prepare_demo
    from lightning_lars.data.ffcv_datamodule import FFCVDataModule
    from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule

    prepare_demo(tmp_path, train_per_class=4, val_per_class=6, num_workers=1, progress=False)
    toy = toy_config("demo").data
    common = {"num_classes": 10, "batch_size": 16, "num_workers": 0, "resolution": 32, "val_resolution": 32}
    ours = TorchvisionDataModule(str(tmp_path / "jpeg"), pipeline=toy.pipeline, **common)
    theirs = FFCVDataModule(
        str(tmp_path / "train.beton"),
        str(tmp_path / "val.beton"),
        pipeline=toy.pipeline,
        **{**common, "num_workers": 1},
    )
    theirs.setup("fit")
    assert (
        (ours.num_train_images, ours.num_val_images)
        == (theirs.num_train_images, theirs.num_val_images)
        == (40, 60)
    )
    seen = 0
    for (x, y), (fx, fy) in zip(ours.val_dataloader(), theirs.val_dataloader(), strict=True):
        assert torch.equal(y, fy.long().view(-1))
        assert x.shape == fx.shape and torch.allclose(x, fx.float(), atol=1e-4), (x - fx.float()).abs().max()
        seen += len(y)
    assert seen == 60


@pytest.mark.parametrize("recipe", recipe_names())
def test_toy_schedule_has_a_decay_phase_after_its_warmup(recipe):
    """A toy run shrinks the schedule with the data: its decay never ends before its warmup does (the TF
    recipes once planned a 2,421-step warmup inside 1,738 steps and logged decay steps -682)."""
    cfg = compose_job([f"recipe={recipe}", "debug=toy"])
    plan = make_plan(cfg, recipe, num_train_images=5000, devices=1, nodes=1)
    assert plan.decay_end_step > plan.warmup_steps >= 0


@pytest.mark.parametrize("recipe", ["ying_tpu_32k", "google_mlperf06_32k", "google_mlperf07_64k"])
def test_toy_tf_schedule_spans_the_sources_tf_epochs(recipe):
    """TF's schedule counts the warmup in epochs of N / B and the run in the source's train_steps: the toy's
    decay ends after as many of its own TF epochs as the source's train_steps are of the source's."""
    full = compose_job([f"recipe={recipe}"])
    # float64, from the recipe
    source_epochs = full.scheduler.total_steps / (1281167 / full.batch.global_size)
    plan = make_plan(compose_job([f"recipe={recipe}", "debug=toy"]), recipe, 5000, 1, 1)
    toy_epochs = (plan.decay_end_step - 1) / (5000 / 64)  # TF's decay ends one step past train_steps
    assert toy_epochs == pytest.approx(source_epochs, abs=1 / (5000 / 64))  # within the one rounded step
    assert plan.lr_schedule(plan.decay_end_step) == pytest.approx(full.scheduler.end_lr)
