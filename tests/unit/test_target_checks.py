"""The checks run before any ``_target_`` is built agree with the libraries that would otherwise fail later:
a model name with timm (``timm.is_model``, ``timm.create_model``), an accelerator with Lightning's
``AcceleratorRegistry`` and ``Trainer``, an optimizer's hyperparameters with the optimizer built for real from the
shipped ``conf/optimizer`` configs."""

from __future__ import annotations

import warnings

import lightning as L
import pytest
import timm
import torch
from helpers import group_config
from hydra.utils import instantiate
from lightning.pytorch.accelerators import AcceleratorRegistry
from omegaconf import OmegaConf

import lightning_lars.models  # noqa: F401  (registers alexnet_bn with timm, as a run does)
from lightning_lars.core.errors import UserError
from lightning_lars.training.target_checks import (
    available_accelerators,
    check_accelerator,
    check_arch,
    check_optimizer,
)

QUIET_TRAINER = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def outcome(call, *args) -> type[BaseException] | None:
    """The exception type ``call(*args)`` raises, or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call(*args)
    except Exception as error:  # noqa: BLE001  (the type is the answer)
        return type(error)
    return None


# --- model names -------------------------------------------------------------------------------------------

TIMM_SAMPLE = timm.list_models()[::250]  # about 6 names across timm's whole list
TYPOS = ["resnet5O", "resnet-50", "ResNet50", "vit_base_patch16", "alexnet_bnn", "resnet50.no_such_tag_x", ""]


@pytest.mark.parametrize(
    "arch", ["resnet50", "resnet50.a1_in1k", "alexnet_bn", "test_resnet", *TIMM_SAMPLE, *TYPOS]
)
def test_a_model_name_is_refused_exactly_when_timm_has_no_such_model(arch):
    refused = outcome(check_arch, arch)
    assert refused in (None, UserError)
    assert (refused is None) == timm.is_model(arch)


@pytest.mark.parametrize("arch", ["test_resnet", "resnet5O", "tset_resnet"])
def test_a_name_accepted_here_is_one_timm_builds(arch):
    """The second oracle: ``timm.create_model`` itself (``test_resnet``: timm's 0.4 M-parameter model)."""
    assert (outcome(check_arch, arch) is None) == (outcome(timm.create_model, arch) is None)


def test_a_typo_names_the_model_meant_and_only_real_models():
    with pytest.raises(UserError) as caught:
        check_arch("resnet5O")
    message = str(caught.value)
    assert message.startswith("model.arch=resnet5O: timm has no such model; close names: ")
    close = message.split("close names: ")[1].split(", ")
    assert "resnet50" in close
    assert all(timm.is_model(name) for name in close)


def test_a_name_like_no_other_says_how_to_list_them():
    with pytest.raises(UserError) as caught:
        check_arch("qqqqqqqqqqqqqqqq")
    assert "close names" not in str(caught.value)
    assert "timm.list_models(" in str(caught.value)


def test_no_name_is_left_to_the_model_default():
    check_arch(None)


# --- accelerators ------------------------------------------------------------------------------------------

ACCELERATORS = ["auto", "cpu", "gpu", "cuda", "mps", "tpu", "xla", "gpuu", "CPU"]


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_an_accelerator_passes_exactly_when_the_trainer_takes_it(accelerator):
    passes = outcome(check_accelerator, accelerator) is None
    takes = outcome(lambda: L.Trainer(accelerator=accelerator, devices=1, **QUIET_TRAINER)) is None
    assert passes == takes


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_an_unknown_name_and_a_missing_device_are_told_apart(accelerator):
    """Unknown: not a name in Lightning's registry ("gpu" is Lightning's alias of "cuda"); missing: a name the
    registry knows whose ``Accelerator.is_available()`` is false on this machine."""
    name = "cuda" if accelerator == "gpu" else accelerator
    known = name == "auto" or name in AcceleratorRegistry.available_accelerators()
    here = name == "auto" or (known and AcceleratorRegistry[name]["accelerator"].is_available())
    if here:
        check_accelerator(accelerator)
        return
    with pytest.raises(UserError) as caught:
        check_accelerator(accelerator)
    message = str(caught.value)
    assert message.startswith(f"trainer.accelerator={accelerator}")
    assert ("not an accelerator Lightning knows" in message) == (not known)
    assert (f"this machine has no {name.upper()} device" in message) == known


def test_the_accelerators_named_as_available_are_those_torch_finds():
    assert "cpu" in available_accelerators()
    assert ("cuda" in available_accelerators()) == torch.cuda.is_available()
    assert ("mps" in available_accelerators()) == torch.backends.mps.is_available()


# --- precision: Lightning's own Trainer(...) judges it, built before W&B opens (tests/unit/test_one_composition.py)


# --- optimizer hyperparameters -----------------------------------------------------------------------------

OPTIMIZER_CASES = [
    ("lars", {}),
    ("lars", {"momentum": 1.5}),
    ("lars", {"form": "no_such_form"}),
    ("lars", {"trust_coefficient": 0.0}),
    ("lamb", {}),
    ("lamb", {"weight_decay": -1.0}),
    ("sgd", {}),
    ("sgd", {"momentum": -1.0}),  # torch's message names no `key=value`: left to the real build, in context
]


@pytest.mark.parametrize("name, changes", OPTIMIZER_CASES, ids=lambda v: str(v))
def test_an_optimizer_config_is_refused_exactly_when_building_it_judges_a_key(name, changes):
    """The shipped ``conf/optimizer/<name>.yaml`` with ``changes``, built for real on a model's parameters
    (what Lightning's ``configure_optimizers`` does later) as the oracle: refused in one line exactly when the
    optimizer itself raises ValueError / TypeError naming one of the config's keys as ``key=value``."""
    # the composed file as plain keys: the schema's types would refuse some changes before the check is reached
    config = OmegaConf.merge(OmegaConf.to_container(group_config("optimizer", name)), changes)
    config.setdefault("lr", 0.1)
    model = torch.nn.Linear(3, 2)
    try:
        instantiate(config)(model.parameters())
        judged = False
    except (ValueError, TypeError) as error:
        judged = any(f"{key}=" in str(error) for key in changes)
    checked = outcome(check_optimizer, config)
    assert checked in (None, UserError)
    assert (checked is UserError) == judged


def test_no_optimizer_or_no_target_is_nothing_to_check():
    check_optimizer(None)
    check_optimizer(OmegaConf.create({"lr": -1.0}))
