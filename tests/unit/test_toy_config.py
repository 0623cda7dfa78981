"""Issue 15.1: `debug=toy` runs every recipe's model: the toy image size is the demo's 32 px or the smallest the
model takes (AlexNet-BN pools 32 px images to 0x0), judged by running the real model, not by a table."""

import pytest
import timm
import torch
from hydra import compose, initialize_config_dir

from lightning_lars import config


def toy_config(recipe):
    with initialize_config_dir(config_dir=str(config.CONF_DIR), version_base="1.3"):
        return compose("train", overrides=[f"recipe={recipe}", "debug=toy"])


def runs_at(arch, pixels):
    model = timm.create_model(arch, num_classes=10).eval()
    try:
        with torch.no_grad():
            model(torch.zeros(2, 3, pixels, pixels))
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("recipe", config.recipe_names())
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
