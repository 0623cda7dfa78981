"""Every recipe trains 3 optimizer steps on the demo data on CPU, through training.run.run, in one process.

`debug=toy` shrinks only the sizes; optimizer, schedule shape, model, BN plan and callbacks stay the recipe's.
On top of it, for time (2 cores, FFCV compiles each recipe's loaders): global batch 16 in micro-batches of 8
(2 accumulation steps), ResNets at 16 px, AlexNet-BN at the size `debug=toy` picks for it, one val batch. fp32 on
CPU (fp16-mixed is GPU-only) and BN statistics over 4 samples (a recipe's span of 32-408 images cannot be
formed from 8-image micro-batches; 4 exercises ghost BN in every recipe) until conf/debug/toy.yaml sets them.
"""

import logging
import math

import pytest

from lightning_lars.config.jobs import compose_job
from lightning_lars.config.recipes import recipe_names
from lightning_lars.models.batch_norm import GroupBatchNorm, batch_norms
from lightning_lars.training import run

pytestmark = [pytest.mark.slow, pytest.mark.demo_data(train_per_class=20, val_per_class=4)]
RECIPES = [name for name in recipe_names() if name != "demo"]


def compose_run(name, data_dir, out_dir):
    # AlexNet-BN: the toy config's own size (the model's minimum, 63 px), as `make recipe=NAME debug=toy` runs it
    sizes = [] if "alexnet" in name else ["data.resolution=16", "data.val_resolution=16"]
    overrides = [
        f"recipe={name}",
        "debug=toy",
        f"paths.data_dir={data_dir}",
        f"paths.log_dir={out_dir}",
        f"paths.output_dir={out_dir}/{name}",
        "trainer.precision=32-true",
        "batch.global_size=16",
        "batch.max_per_device=8",
        "batch.bn_group=4",
        *sizes,
        "trainer.limit_val_batches=1",
    ]
    return compose_job(overrides)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_three_steps(name, data_dir, tmp_path, capsys, caplog, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    caplog.set_level(logging.INFO)
    cfg = compose_run(name, data_dir, tmp_path)
    built = {}
    original_build = run.build

    def build_and_keep(*args, **kwargs):
        built["parts"] = original_build(*args, **kwargs)
        return built["parts"]

    monkeypatch.setattr(run, "build", build_and_keep)  # keep the real parts to inspect after the run
    metrics = run.run(cfg)
    trainer, module, _, plan = built["parts"]
    out = capsys.readouterr().out
    assert trainer.global_step == 3, name
    assert math.isfinite(metrics["train/loss_step"]), name
    printed = "plan: global batch 16 = 1 device x 8 images x 2 accumulation steps; ghost BN over 4 images"
    assert printed in caplog.text and "steps/epoch" in caplog.text and "peak LR" in caplog.text
    assert plan.bn_mode == "ghost"
    assert all(isinstance(bn, GroupBatchNorm) and bn.group_size == 4 for _, bn in batch_norms(module))
    assert f"Results: recipe {name}" in out
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    assert lr == pytest.approx(module.lr_schedule(trainer.global_step - 1)), name  # the schedule drove the LR
