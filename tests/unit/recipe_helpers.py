"""Compose a recipe and build its parts the way train.py does, without data or a trainer."""

from __future__ import annotations

from functools import cache

import torch
from helpers import small_conv_net
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from lightning_lars.config import schema  # noqa: F401  (stores the groups' schemas the recipes compose with)
from lightning_lars.config.paths import CONF_DIR
from lightning_lars.config.recipes import recipe_names
from lightning_lars.optim.param_groups import param_groups
from lightning_lars.schedules.build import build_lr_schedule

IMAGENET_TRAIN_IMAGES = 1_281_167
RECIPES = [name for name in recipe_names() if name != "demo"]


@cache
def _composed(name: str, overrides: tuple[str, ...]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=[f"recipe={name}", *overrides])


def recipe(name: str, *overrides: str) -> DictConfig:
    return _composed(name, tuple(overrides)).copy()


def build_optimizer(cfg: DictConfig, model: nn.Module | None = None) -> torch.optim.Optimizer:
    """As ImageClassifier.configure_optimizers: groups by the recipe's rule, the recipe's optimizer."""
    if model is None:  # conv + BN + linear: one tensor of each kind the exclusion rule sorts
        model = small_conv_net(widths=(4,), last_conv=None, classes=2)
    factory = instantiate(cfg.optimizer)
    groups = param_groups(model, factory.keywords.get("weight_decay", 0.0), cfg.model.exclusion_rule)
    return factory(groups, lr=0.0)


def build_schedule(cfg: DictConfig, global_size: int | None = None):
    """(step -> lr, peak LR, steps per epoch) at the recipe's global batch on ImageNet-1k, as train.py."""
    global_size = global_size or cfg.batch.global_size
    steps_per_epoch = IMAGENET_TRAIN_IMAGES // global_size
    scheduler = OmegaConf.to_container(cfg.scheduler, resolve=True)  # source schedules interpolate other keys
    schedule = build_lr_schedule(scheduler, global_size, steps_per_epoch, cfg.trainer.max_epochs)
    return schedule, schedule.peak_lr, steps_per_epoch
