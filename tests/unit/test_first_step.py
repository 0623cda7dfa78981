"""FirstStepTime inside a real Lightning fit with gradient accumulation: the plan line comes once, after the
first optimizer step (not its first micro-batch), timed from the given start."""

import logging
import time

import lightning as L
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning_lars.callbacks.monitors.first_step import FirstStepTime


class RecordsSteps(FirstStepTime):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        before = self.seconds
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if before is None and self.seconds is not None:
            self.fired_at = (batch_idx, trainer.global_step)


class KeepsMessages(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_first_step_line_after_the_accumulated_step(tmp_path):
    started = time.perf_counter() - 7.0  # as if the command line came 7 s before fit
    timer = RecordsSteps(started)
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=3,
        accumulate_grad_batches=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    # Lightning's logger stops propagating to the root when it is imported before any root handler exists, which
    # depends on the test order in a worker, so the records are taken where rank_zero_info writes them.
    lightning_logger = logging.getLogger("lightning.pytorch")
    kept, level = KeepsMessages(), lightning_logger.level
    lightning_logger.addHandler(kept)
    lightning_logger.setLevel(logging.INFO)
    try:
        before_fit = time.perf_counter()
        trainer.fit(BoringModel())
        after_fit = time.perf_counter()
    finally:
        lightning_logger.removeHandler(kept)
        lightning_logger.setLevel(level)
    assert timer.fired_at == (1, 1)  # the second micro-batch completes optimizer step 1
    assert before_fit - started <= timer.seconds <= after_fit - started
    lines = [m for m in kept.messages if "first optimizer step done" in m]
    assert lines == [
        f"[lightning-lars] plan: first optimizer step done {timer.seconds:.1f} s after the command"
        " line (imports, config, loaders, JIT compile, one step)"
    ]
