"""Hydra's command line as jobs: whether it sweeps or only prints, each job of a sweep, and the config a job gets
composed in this process (tests, benchmarks)."""

from __future__ import annotations

import itertools

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict

from lightning_lars.config import (  # noqa: F401  (schema: the schemas, recipes: the recipes, in the ConfigStore)
    override_text,
    recipes,
    schema,
)
from lightning_lars.config.paths import CONF_DIR
from lightning_lars.core.errors import UserError

# Hydra's ways to ask for a sweep: the flags, or the override that sets the mode a config can also set.
MULTIRUN_FLAGS = ("-m", "--multirun")
# Hydra flags that print (config, help, info) and run no job: nothing to check on disk for them.
PRINT_ONLY_FLAGS = (
    "--cfg",
    "-c",
    "--help",
    "-h",
    "--hydra-help",
    "--info",
    "-i",
    "--shell-completion",
    "-sc",
)


def is_multirun(argv: list[str]) -> bool:
    """Whether Hydra will run ``argv`` as a sweep (``-m``, ``--multirun`` or ``hydra.mode=MULTIRUN``)."""
    return any(a in MULTIRUN_FLAGS or a.replace(" ", "").upper() == "HYDRA.MODE=MULTIRUN" for a in argv)


def prints_only(argv: list[str]) -> bool:
    """Whether the command line asks Hydra to print something instead of training."""
    return any(arg.split("=", 1)[0] in PRINT_ONLY_FLAGS for arg in argv)


def sweep_jobs(overrides: list[str]) -> list[list[str | None]]:
    """Each job of a sweep, as Hydra's basic sweeper expands it (``seed=0,1``, ``range(..)``, ``choice(..)``,
    ``glob(..)`` over a group's files): every combination in its order, one entry per override in
    ``overrides``' positions. An ``interval(..)``, for a sweeper of its own (Optuna, Ax), is None: that
    sweeper picks its values."""
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()  # glob(..) lists a group's options through it
            choices = []
            for override in OverridesParser.create(config_loader=loader).parse_overrides(overrides):
                if not override.is_sweep_override():
                    choices.append([override.input_line])
                elif override.is_discrete_sweep():
                    key = override.get_key_element()
                    choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
                else:
                    choices.append([None])
    except HydraException:  # OverrideParseException, or the lexer's own for a character it does not know
        raise UserError(
            f"{override_text.parse_error_line(overrides)} (a sweep is key=a,b, range(0,3) or choice(a,b))"
        ) from None
    return [list(job) for job in itertools.product(*choices)]


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


def to_yaml(cfg: DictConfig) -> str:
    return yaml.safe_dump(OmegaConf.to_container(cfg, resolve=False, enum_to_str=True), sort_keys=False)
