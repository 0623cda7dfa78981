"""DivergenceGuard in a real fit: NaN and exploding losses stop the run naming the step; no bad checkpoint."""

import pytest
import torch
from callback_harness import classifier, images, loader, trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_lars.callbacks.monitors.divergence import DivergenceError, DivergenceGuard

from lightning_lars.core.errors import UserError


def _fit_with_checkpoints(tmp_path, dataset, guard, max_steps=12, batch_size=4, lr=0.01):
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "checkpoints", every_n_train_steps=1, save_last=True, save_top_k=-1
    )
    fit = trainer(
        [guard, checkpoint], tmp_path, max_steps=max_steps, enable_checkpointing=True, limit_val_batches=0
    )
    with pytest.raises(DivergenceError) as caught:
        fit.fit(classifier("sgd", lr=lr), loader(dataset, batch_size=batch_size))
    return str(caught.value), tmp_path / "checkpoints"


def _saved_steps(folder):
    return sorted(torch.load(p, weights_only=False)["global_step"] for p in folder.glob("*.ckpt"))


def test_nan_loss_stops_at_its_step_and_keeps_the_last_good_checkpoint(tmp_path):
    # Image 21 is NaN: batch 5 (4 images per batch) gives a NaN loss in optimizer step 5.
    message, folder = _fit_with_checkpoints(
        tmp_path, images(48, nan_at=21), DivergenceGuard(check_every_n_steps=3)
    )
    assert message.startswith("training diverged at step 5 (epoch 0): loss is nan;")
    assert "\n" not in message and "run.ckpt_path=" in message and "last.ckpt" in message
    # Steps 1..5 were saved before the NaN step's update; nothing after it (its weights are NaN).
    steps = _saved_steps(folder)
    assert steps and max(steps) == 5
    last = torch.load(folder / "last.ckpt", weights_only=False)
    assert last["global_step"] == 5
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values() if t.is_floating_point())


def test_exploding_loss_is_caught_with_finite_weights(tmp_path):
    # The model learns the class patterns in ~15 steps; from image 160 (step 20, 8 per batch) the labels shift
    # by one class, so the confident model's loss jumps by orders of magnitude while every weight stays finite.
    guard = DivergenceGuard(check_every_n_steps=2, explosion_factor=3.0, min_steps=2)
    dataset = images(240, learnable=True, relabel_from=160)
    message, folder = _fit_with_checkpoints(tmp_path, dataset, guard, max_steps=30, batch_size=8, lr=0.05)
    # Checked at every save too: the window is the steps since the last check, starting at step 20.
    assert message.startswith("training diverged at step 20 (epoch 0): loss exploded")
    assert "mean of step 20)" in message or "mean of steps 20-" in message
    assert max(_saved_steps(folder)) <= 21


def test_divergence_is_a_user_error_so_the_entry_point_prints_one_line():
    assert issubclass(DivergenceError, UserError)


def test_a_healthy_run_is_not_stopped(tmp_path):
    guard = DivergenceGuard(check_every_n_steps=1, explosion_factor=3.0, min_steps=0)
    fit = trainer([guard], tmp_path, max_steps=6, limit_val_batches=0)
    fit.fit(classifier("sgd", lr=0.01), loader(images(48), batch_size=4))
    assert fit.global_step == 6 and guard.diverged is None and 0 < guard.best_window_loss < 10
