"""A recipe planned with its callbacks: the per-step values they apply (weight-decay schedules, the RMSprop
blend) come from the callbacks themselves, built here, a layer above them, and handed to the plan. For a run
(`plan_run`): the plan on the devices Lightning will count (`planned_world`), with the run's datamodule."""

from __future__ import annotations

import dataclasses

from hydra.utils import get_object, instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from omegaconf import DictConfig

from lightning_lars.config import schema
from lightning_lars.core.errors import UserError
from lightning_lars.recipe.plan import compose_recipe, configured_world, make_plan, planned_train_images
from lightning_lars.recipe.planned_run import RecipePlan
from lightning_lars.schedules.scaling import plan_batch


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


def planned_world(trainer: DictConfig) -> tuple[int, int]:
    """(devices per node, nodes) as Lightning's accelerator will count them: ``devices: auto`` is every GPU of
    the node, or 1 on a CPU. The trainer built with the plan is held to it (`build`)."""
    accelerator, devices = trainer.get("accelerator", "auto"), trainer.get("devices", "auto")
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and CUDAAccelerator.is_available())
    kind = CUDAAccelerator if on_gpu else CPUAccelerator
    try:
        count = (
            kind.auto_device_count()
            if devices == "auto"
            else len(kind.get_parallel_devices(kind.parse_devices(devices)))
        )
    except (MisconfigurationException, TypeError, ValueError) as err:  # Lightning's own refusal
        raise UserError(f"trainer.devices={devices}: {str(err).splitlines()[0]}") from None
    return count, int(trainer.get("num_nodes", 1))


def plan_run(cfg: DictConfig, callbacks: list, plan: RecipePlan | None = None):
    """The run's datamodule and its one plan, on the devices Lightning will use; returns (datamodule, plan).
    ``plan``: the entry point's (`lightning_lars.train.check_job`, made before torch loaded, at the data's count):
    taken as it is, its batch split here only where ``devices: auto`` left it to Lightning, its LR schedule never
    recomputed. Without one (tests, benchmarks, in-process callers) the plan is made here, once, at the
    datamodule's train-set size."""
    devices, nodes = planned_world(cfg.trainer)
    batch = plan.batch_plan if plan is not None and configured_world(cfg.trainer) is not None else None
    if batch is not None and batch.world_size != devices * nodes:
        raise UserError(
            f"the config plans {batch.world_size} device(s), Lightning counts {devices} x {nodes} node(s): set"
            f" trainer.devices={devices} or trainer.num_nodes to match"
        )
    if batch is None:  # the split the pre-torch plan could not make, or no plan yet
        batch = plan_batch(
            cfg.batch.global_size, devices, nodes, cfg.batch.max_per_device, cfg.batch.bn_group
        )
    datamodule = instantiate(schema.plain(cfg.data), batch_size=batch.per_device, seed=cfg.seed)
    images = datamodule.num_train_images
    if plan is None:
        plan = make_plan(cfg, cfg.recipe_name, images, devices, nodes, counted=True, batch_plan=batch)
    elif images != plan.num_train_images:  # count_train_images disagrees with the datamodule: our bug
        raise RuntimeError(
            f"internal error: the plan counted {plan.num_train_images} train images before torch loaded, the"
            f" datamodule has {images}; data/image_count.py must count as the datamodule does"
        )
    # the callbacks that set a hyperparameter per step (their planned_values) join the plan: no step is recounted
    hooks = [c for c in callbacks if hasattr(c, "planned_values")]
    return datamodule, dataclasses.replace(plan, batch_plan=batch, value_hooks=hooks)
