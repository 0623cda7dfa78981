"""The config a job gets, composed in this process (tests, benchmarks, the recipe card) as Hydra composes it
for the entry point."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from lightning_lars.config import recipes, schema  # noqa: F401  (the schemas and recipes in the ConfigStore)
from lightning_lars.config.paths import CONF_DIR


def compose_job(overrides: list[str]) -> DictConfig:
    """The config a run's job gets, composed in this process (tests, benchmarks): Hydra's node is made the current
    ``HydraConfig`` (``recipe_name`` reads ``${hydra:runtime.choices.recipe}``), then dropped, as a real run's job
    config holds no ``hydra`` node."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg
