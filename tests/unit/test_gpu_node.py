"""What broke on the first GPU node, shown on this CPU machine where its cause can be: the clone's root without
an editable install (the package must still find ``lightning_lars.callbacks``), a node without FFCV,
mlperf-logging or submitit (``pytest -m gpu tests`` must still collect), and ``data=synthetic`` (its batches
must already be what the real loader hands the model: on the run's device, in its dtype and layout)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from helpers import NORMALISED_AFTER_COPY, NORMALISED_BEFORE_COPY, demo_ffcv_module

from lightning_lars.data.synthetic import SyntheticDataModule

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("ffcv", "mlperf_logging", "submitit", "hydra_plugins")
# Loaded first by the interpreter (sitecustomize): these imports then fail as on a node that lacks them.
HIDE = f"""
import importlib.abc, sys
class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hidden())
"""


def test_the_clone_imports_its_callbacks_from_its_root_without_an_editable_install():
    """``python -S`` leaves site-packages (and setuptools' editable finder) out, as a node that installed the
    wheel non-editable and runs from the clone's root sees it: the clone's lightning_lars comes first."""
    code = "import importlib.util as u; s = u.find_spec('lightning_lars.callbacks.monitors'); print(s.origin)"
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == ROOT / "callbacks" / "monitors" / "__init__.py"


@pytest.mark.slow
def test_gpu_tests_collect_where_ffcv_mlperf_logging_and_submitit_are_missing(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(HIDE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    hidden = subprocess.run(
        [sys.executable, "-c", "import ffcv"], env=env, capture_output=True, text=True, check=False
    )
    assert "No module named 'ffcv'" in hidden.stderr  # the packages are hidden indeed
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-rs", "-m", "gpu", "-p", "no:cacheprovider"]
        + ["tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "tests/gpu/test_gpu.py::test_recipe_runs_a_few_steps_on_nccl_at_world_size_one" in done.stdout
    assert "needs ffcv, not installed here: pip install 'lightning-lars[ffcv]'" in done.stdout


class BatchRecorder(L.Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        images, labels = batch
        self.seen.append((images.device, images.dtype, images.data_ptr(), labels.device))


class Linear(L.LightningModule):
    def __init__(self, resolution: int):
        super().__init__()
        self.layer = torch.nn.Linear(3 * resolution * resolution, 10)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return torch.nn.functional.cross_entropy(self.layer(images.float().flatten(1)), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_synthetic_batches_are_drawn_once_on_the_runs_device_and_never_copied(device):
    """Every step gets one of the pool's own tensors, already on the run's device (on CUDA the old pool in
    host memory was copied to the GPU at every step: new storage each step)."""
    data = SyntheticDataModule(
        num_classes=10, batch_size=4, resolution=8, num_train_images=4 * 6, pool_size=2
    )
    recorder = BatchRecorder()
    trainer = L.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        max_steps=6,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
    )
    trainer.fit(Linear(8), datamodule=data)
    root = trainer.strategy.root_device
    assert all(
        image_device == root and label_device == root for image_device, _, _, label_device in recorder.seen
    )
    assert len({pointer for _, _, pointer, _ in recorder.seen}) == 2  # the pool's two batches, cycled


@pytest.mark.parametrize("normalize_after_copy", [False, True], ids=["cpu_normalised", "gpu_variant"])
def test_synthetic_batches_have_the_real_loaders_dtype_and_layout(tmp_path, normalize_after_copy):
    """The oracle is FFCV's own loader over generated JPEGs, with the same ops: what it hands over (dtype,
    layout, shape) after the transfer hook is what the synthetic module hands over."""
    pytest.importorskip("ffcv", reason="FFCV is not installed here: pip install 'lightning-lars[ffcv]'")
    ops = NORMALISED_AFTER_COPY if normalize_after_copy else NORMALISED_BEFORE_COPY
    pipeline = {"train": ops, "val": ops}
    real = demo_ffcv_module(tmp_path, ops, batch_size=4)
    synthetic = SyntheticDataModule(num_classes=2, batch_size=4, resolution=32, pipeline=pipeline)
    handed_over = []
    for module in (real, synthetic):
        images, labels = next(iter(module.val_dataloader()))
        handed_over.append((images.dtype, labels.dtype))
        images, labels = module.on_after_batch_transfer((images, labels), 0)
        layout = images.is_contiguous(memory_format=torch.channels_last)
        handed_over.append((images.dtype, images.shape, layout, labels.dtype, labels.shape))
    assert handed_over[:2] == handed_over[2:], handed_over
    assert handed_over[0][0] == (torch.uint8 if normalize_after_copy else torch.float32)
