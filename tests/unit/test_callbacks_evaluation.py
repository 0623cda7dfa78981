"""EvaluationSchedule inside a real Lightning fit: validation after exactly the planned optimizer steps, with
gradient accumulation, across epoch boundaries, at a final step mid-epoch, and after a resume."""

from __future__ import annotations

import lightning as L
import pytest
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_lars.callbacks.techniques.evaluation import EvaluationSchedule

from tests.unit.callback_harness import classifier, images, loader, trainer


class EvalSteps(L.Callback):
    def __init__(self):
        self.steps = []

    def on_validation_end(self, trainer, pl_module):
        self.steps.append(trainer.global_step)


def _fit(tmp_path, eval_steps, ckpt_path=None, extra=()):
    seen = EvalSteps()
    # 48 images in micro-batches of 8, 2 per optimizer step: 3 steps per pass over the data; 8 steps = 2 2/3 passes
    fit = trainer(
        [EvaluationSchedule(eval_steps, epoch_at=lambda step: step / 3), seen, *extra],
        tmp_path,
        max_steps=8,
        max_epochs=-1,
        accumulate_grad_batches=2,
        check_val_every_n_epoch=None,
        val_check_interval=1,
        limit_val_batches=1,
        enable_checkpointing=bool(extra),
    )
    fit.fit(classifier(optimizer="sgd"), loader(images(48)), loader(images(8)), ckpt_path=ckpt_path)
    return fit, seen.steps


def test_validates_after_exactly_the_planned_steps(tmp_path):
    fit, steps = _fit(tmp_path, [2, 3, 7, 8])  # mid-pass, a pass's end, mid-pass, the final step mid-pass
    assert fit.global_step == 8
    assert steps == [2, 3, 7, 8]
    assert float(fit.callback_metrics["train/epoch"]) == pytest.approx(8 / 3)  # logged in the plan's epochs


def test_a_resumed_run_evaluates_only_the_steps_still_ahead(tmp_path):
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt",
        every_n_train_steps=4,
        save_top_k=-1,
        filename="step{step}",
        auto_insert_metric_name=False,
    )
    _, first = _fit(tmp_path, [2, 5, 7, 8], extra=[checkpoint])
    assert first == [2, 5, 7, 8]
    _, resumed = _fit(tmp_path, [2, 5, 7, 8], ckpt_path=str(tmp_path / "ckpt" / "step4.ckpt"))
    assert resumed == [5, 7, 8]
