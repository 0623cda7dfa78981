"""TimeToTarget in a real fit: the clock stops at the first eval at or above target, and training stops."""

import pytest
from callback_harness import classifier, images, loader, trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_lars.callbacks.monitors.time_to_target import TimeToTarget


def _fit(tmp_path, callback, max_epochs=3, **kwargs):
    extra, fit_options = kwargs.pop("extra", []), kwargs.pop("fit", {})
    fit = trainer([callback, *extra], tmp_path, max_epochs=max_epochs, **kwargs)
    fit.fit(classifier("sgd", lr=0.01), loader(images(16)), loader(images(16, seed=1)), **fit_options)
    return fit


def test_a_reachable_target_stops_training_at_the_first_eval(tmp_path):
    # Balanced labels: top-1 above 0.01 % means one image of 16 right, which a fixed-seed model does.
    callback = TimeToTarget(target_top1=0.01)
    fit = _fit(tmp_path, callback, max_epochs=3)
    assert callback.reached and len(callback.evals) == 1
    assert callback.epochs_to_target == pytest.approx(1.0) and callback.time_to_target_s > 0
    assert fit.current_epoch == 1  # stopped after the first of 3 epochs
    summary = callback.summary()
    assert (
        summary["target/reached"] == 1.0 and summary["target/time_to_target_s"] == callback.time_to_target_s
    )


def test_an_unreached_target_records_every_eval_and_trains_on(tmp_path):
    callback = TimeToTarget(target_top1=100.0)
    fit = _fit(tmp_path, callback, max_epochs=3)
    if callback.reached:
        pytest.skip("the model got all 16 random-label images right")
    assert fit.current_epoch == 3 and [e[0] for e in callback.evals] == pytest.approx([1.0, 2.0, 3.0])
    elapsed = [e[3] for e in callback.evals]
    assert elapsed == sorted(elapsed) and callback.summary()["target/reached"] == 0.0


def test_eval_every_n_epochs_is_the_trainers(tmp_path):
    callback = TimeToTarget(target_top1=None)
    _fit(tmp_path, callback, max_epochs=4, check_val_every_n_epoch=2)
    assert [e[0] for e in callback.evals] == pytest.approx([2.0, 4.0])
    assert not callback.reached and "target/reached" not in callback.summary()


def test_a_resumed_run_keeps_its_clock_and_evals(tmp_path):
    first = TimeToTarget(target_top1=100.0)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    _fit(tmp_path, first, max_epochs=2, enable_checkpointing=True, extra=[checkpoint])
    second = TimeToTarget(target_top1=100.0)
    _fit(
        tmp_path,
        second,
        max_epochs=3,
        enable_checkpointing=True,
        extra=[ModelCheckpoint(dirpath=tmp_path / "ckpt2")],
        fit={"ckpt_path": str(tmp_path / "ckpt" / "last.ckpt")},
    )
    assert len(second.evals) == 3 and second.evals[:2] == first.evals[:2]
    assert second.evals[2][3] > first.evals[1][3]  # elapsed time continues from the first attempt


def test_target_is_a_percentage():
    with pytest.raises(ValueError, match="percentage"):
        TimeToTarget(target_top1=0.759 - 1)
