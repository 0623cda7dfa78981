"""The Python API as README.md's "Python API" section documents it: its imports work, they are each package's
``__all__`` (documented and exported agree), and its Lightning example trains as written."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys

from helpers import ROOT, entry_point_env

SECTION = re.search(r"^## Python API\n(.*?)^## ", (ROOT / "README.md").read_text(), re.DOTALL | re.MULTILINE)
IMPORTS, EXAMPLE = re.findall(r"```python\n(.*?)```", SECTION.group(1), re.DOTALL)


def python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter with the checkout importable: what a user's own script sees."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=entry_point_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_documented_imports_are_each_packages_public_names():
    documented = {node.module: [a.name for a in node.names] for node in ast.parse(IMPORTS).body}
    assert set(documented) == {
        "lightning_lars.optim",
        "lightning_lars.schedules",
        "lightning_lars.data",
        "lightning_lars.parallel",
    }
    for package, names in documented.items():
        module = importlib.import_module(package)
        assert sorted(names) == sorted(module.__all__), package  # the README lists all, and no more
        for name in names:  # each the object its defining module holds, not a copy or a wrapper
            exported = getattr(module, name)
            defined_in = importlib.import_module(exported.__module__)
            assert getattr(defined_in, name) is exported and defined_in.__name__.startswith(package), name


def test_the_documented_imports_run_and_keep_the_light_packages_light():
    """In a fresh interpreter: the four import lines work (LARS from lightning_lars.optim raised ImportError);
    lightning_lars.data and .parallel load their modules on first use, so the command line's checks and the
    launcher, which import those packages, still start without torch."""
    packages = "lightning_lars.data, lightning_lars.parallel, lightning_lars.schedules"
    light = f"import sys, {packages}; print('torch' in sys.modules)"
    done = python(light)
    assert done.returncode == 0 and done.stdout.split() == ["False"], done.stderr[-2000:]
    done = python(IMPORTS + "print(LARS.__module__, TorchvisionDataModule.__module__, register.__module__)")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [
        "lightning_lars.optim.lars",
        "lightning_lars.data.torchvision_datamodule",
        "lightning_lars.parallel.bucket_hook",
    ]


def test_the_readme_example_trains_with_lars_and_its_schedule():
    """The example as printed (16 steps), then a second fit of its module read back: LARS at the LR of the
    schedule's step."""
    check = """
trainer = L.Trainer(max_steps=8, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
model = Classifier()
trainer.fit(model, torch.utils.data.DataLoader(images, batch_size=64))
optimizer = trainer.optimizers[0]
print(trainer.global_step, type(optimizer).__name__, optimizer.param_groups[0]["lr"])
"""
    done = python(EXAMPLE + check)
    assert done.returncode == 0, done.stderr[-3000:]
    steps, name, lr = done.stdout.split()[-3:]
    assert (steps, name) == ("8", "LARS")
    # the oracle, from the README's numbers: peak 2.0 x 64 / 256 = 0.5, warmup 0.5 x 8 = 4 steps, then
    # (1 - t)^2 over the 12 steps to 16: the LR of step 8 is 0.5 x (1 - 4 / 12)^2
    assert abs(float(lr) - 0.5 * (1 - 4 / 12) ** 2) < 1e-6, lr
