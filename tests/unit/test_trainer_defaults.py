"""``conf/trainer/default.yaml`` read by Lightning's own Trainer: what its settings do once Lightning has them."""

import warnings

import lightning as L
import pytest
import torch
from helpers import group_config
from hydra.utils import instantiate


def test_the_trainer_turns_on_cudnns_autotuner_that_lightning_leaves_off(tmp_path, monkeypatch):
    """bench_gpu.py's bare loop autotunes cuDNN's convolutions; through the recipe the same must hold, or the
    recipe-vs-bare ratio on a GPU compares unlike with like."""
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)  # torch's default; restored after
    L.Trainer(default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert torch.backends.cudnn.benchmark is False  # Lightning's benchmark=None keeps torch's value
    instantiate(group_config("trainer", "default"), default_root_dir=str(tmp_path), logger=False)
    assert torch.backends.cudnn.benchmark is True


@pytest.mark.parametrize("deterministic", [True, "warn"])
def test_a_deterministic_run_leaves_the_autotuner_off_without_lightnings_warning(
    tmp_path, monkeypatch, deterministic
):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    cfg = group_config("trainer", "default")
    cfg.deterministic = deterministic
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            instantiate(cfg, default_root_dir=str(tmp_path), logger=False)
        assert torch.backends.cudnn.benchmark is False
        # Lightning's "You passed `deterministic=True` and `benchmark=True`" (cudnn.deterministic ignored)
        assert not [w for w in caught if "benchmark=True" in str(w.message)]
    finally:
        torch.use_deterministic_algorithms(False)  # Lightning sets it for the whole process
