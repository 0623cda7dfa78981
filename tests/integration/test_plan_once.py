"""A training run is planned once: in a real 2-step run of the entry point (the demo recipe on its demo data),
`make_plan`, `plan_batch` and `build_lr_schedule` each run one time, counted by wrapping them in the run's own
process (the package carries no counter). And the pre-torch count of the train images the plan is made at equals
what the datamodule the run trains from reports (the oracle: the FFCV datamodule reading the ``.beton``)."""

from __future__ import annotations

import ast
import sys

import pytest
from helpers import run
from omegaconf import OmegaConf

# Wrap each planning function where it is defined and wherever a module imported it by name before the wrap
COUNTED = """import atexit, runpy, sys
import lightning_lars.recipe.plan, lightning_lars.schedules.build, lightning_lars.schedules.scaling
calls = {}
def counted(name, function):
    def wrapper(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return function(*args, **kwargs)
    return wrapper
for module, name in [
    (lightning_lars.recipe.plan, "make_plan"),
    (lightning_lars.schedules.scaling, "plan_batch"),
    (lightning_lars.schedules.build, "build_lr_schedule"),
]:
    original = getattr(module, name)
    wrapped = counted(name, original)
    for loaded in list(sys.modules.values()):
        if getattr(loaded, name, None) is original:
            setattr(loaded, name, wrapped)
atexit.register(lambda: print("planned:", sorted(calls.items()), file=sys.stderr, flush=True))
sys.argv = ["lightning_lars.train", *sys.argv[1:]]
runpy.run_module("lightning_lars.train", run_name="__main__")
"""


def planned(done) -> dict[str, int]:
    lines = [line for line in done.stderr.splitlines() if line.startswith("planned:")]
    assert len(lines) == 1, done.stdout[-2000:] + done.stderr[-3000:]
    return dict(ast.literal_eval(lines[0].removeprefix("planned:")))  # our printout: [(name, count), ...]


@pytest.mark.slow
@pytest.mark.parametrize("devices", ["auto", "1"])  # the split after torch loads, and before it
def test_a_two_step_run_plans_once(data_dir, tmp_path, devices):
    args = ["recipe=demo", f"paths.data_dir={data_dir}", "model.arch=test_resnet", "trainer.max_steps=2"]
    args += [f"trainer.devices={devices}", "trainer.limit_val_batches=1", "~logger"]
    args += [f"hydra.run.dir={tmp_path / 'run'}"]
    done = run([sys.executable, "-c", COUNTED, *args], timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert planned(done) == {"make_plan": 1, "plan_batch": 1, "build_lr_schedule": 1}
    assert "plan: stops early after step 2" in done.stdout + done.stderr  # it trained, to the planned step


@pytest.mark.slow
@pytest.mark.parametrize("holdout", [0.0, 0.1])
def test_the_pre_torch_count_is_the_datamodules(data_dir, holdout):
    from hydra.utils import instantiate

    from lightning_lars.data.image_count import count_train_images

    data = {
        "_target_": "lightning_lars.data.ffcv_datamodule.FFCVDataModule",
        "train_path": str(data_dir / "demo" / "train.beton"),
        "val_path": str(data_dir / "demo" / "val.beton"),
        "num_classes": 10,
        "holdout": holdout,
    }
    cfg = OmegaConf.create({"data": data})
    datamodule = instantiate(cfg.data, batch_size=8)
    assert count_train_images(cfg) == datamodule.num_train_images
    assert datamodule.num_train_images == (160 if not holdout else 144)  # 16 a class x 10; a tenth held out
