"""fp16 recipes under strategy=fsdp2 stop at once with one line naming the fix; the others build the strategy."""

from __future__ import annotations

import lightning as L
import pytest
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.strategies import ModelParallelStrategy
from recipe_helpers import RECIPES, recipe

from lightning_lars.config.compose import explain_instantiation_error
from lightning_lars.parallel.fsdp import FSDP2Strategy


def test_lightning_itself_refuses_fp16_under_model_parallel():
    """The premise, from the real library: without our check the run would die in Trainer(...), after the
    datamodule and the strategy were built, with a message about Fabric."""
    with pytest.raises(ValueError, match="does not support"):
        L.Trainer(accelerator="cpu", devices=1, strategy=ModelParallelStrategy(), precision="16-mixed")


def test_fp16_recipes_under_fsdp2_stop_with_the_fix_named():
    fp16 = [name for name in RECIPES if str(recipe(name).trainer.precision) == "16-mixed"]
    assert len(fp16) >= 3, fp16  # NVIDIA, Fujitsu, Sony, Tencent trained in fp16
    for name in fp16:
        with pytest.raises(InstantiationException) as caught:  # as train.build instantiates it
            instantiate(recipe(name, "strategy=fsdp2").strategy)
        line = explain_instantiation_error(caught.value)  # what the entry point prints after "error: "
        assert "\n" not in line and "trainer.precision=bf16-mixed" in line and "strategy=ddp_bucketed" in line


def test_bf16_recipe_under_fsdp2_builds_the_strategy():
    cfg = recipe("lamb_32k", "strategy=fsdp2")
    assert str(cfg.trainer.precision) == "bf16-mixed"
    assert isinstance(instantiate(cfg.strategy), FSDP2Strategy)
