"""A recipe planned with its callbacks: the per-step values they apply (weight-decay schedules, the RMSprop
blend) come from the callbacks themselves, built here, a layer above them, and handed to the plan."""

from __future__ import annotations

from hydra.utils import get_object, instantiate
from omegaconf import DictConfig

from lightning_lars.recipe.plan import compose_recipe, make_plan, planned_train_images
from lightning_lars.recipe.planned_run import RecipePlan


def value_callbacks(cfg: DictConfig) -> list:
    """The config's callbacks that set a hyperparameter per step (a ``planned_values`` method), built; the
    others are not: a checkpoint or a logger's callback needs the run's folder."""
    return [
        instantiate(node)
        for node in (cfg.get("callbacks") or {}).values()
        if node is not None and "_target_" in node and hasattr(get_object(node._target_), "planned_values")
    ]


def plan_recipe(
    name: str, devices: int = 1, nodes: int = 1, overrides: list[str] | tuple[str, ...] = ()
) -> RecipePlan:
    """Compose recipe ``name`` (with ``overrides``) and plan it at ``epoch_length.num_train_images`` images
    (ImageNet-1k: 1,281,167) on ``devices x nodes``, with its callbacks' values: no data, no GPU."""
    cfg = compose_recipe(name, overrides)
    return plan_composed(cfg, name, devices, nodes)


def plan_composed(cfg: DictConfig, name: str, devices: int = 1, nodes: int = 1) -> RecipePlan:
    """``cfg``, composed as recipe ``name``, planned as `plan_recipe` plans it."""
    images = planned_train_images(cfg, name)
    return make_plan(cfg, name, images, devices, nodes, callbacks=value_callbacks(cfg))
