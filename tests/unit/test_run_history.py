"""RunHistory (the numbers behind report.png) inside a real Lightning fit: a run stopped by max_steps puts its
train point at the same fractional epoch as its evaluation, and images/s leaves the evaluation's time out."""

import time

import lightning as L
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning_lars.callbacks.monitors.run_history import RunHistory
from lightning_lars.callbacks.monitors.throughput import ThroughputCallback

VAL_SLEEP_S = 0.5  # per validation batch: far longer than the few training batches take


class SlowValidation(BoringModel):
    def validation_step(self, batch, batch_idx):
        time.sleep(VAL_SLEEP_S)
        loss = self.step(batch)
        self.log("val/loss", loss)  # the key RunHistory reads, as our module logs it
        return loss


def test_partial_epoch_is_fractional_and_throughput_excludes_evaluation(tmp_path):
    history = RunHistory()
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_steps=4,
        limit_train_batches=16,
        limit_val_batches=1,
        val_check_interval=4,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[history],
    )
    started = time.perf_counter()
    trainer.fit(SlowValidation())
    wall_s = time.perf_counter() - started

    (train_row,) = [row for row in history.epochs if "images_per_sec" in row]
    (val_row,) = [row for row in history.epochs if "val_loss" in row]
    assert train_row["epoch"] == pytest.approx(4 / 16) == pytest.approx(val_row["epoch"])  # not epoch 1
    images = 4 * 2  # BoringModel's batches hold 2 samples
    assert wall_s > VAL_SLEEP_S  # the evaluation ran inside the epoch...
    assert train_row["images_per_sec"] > images / (VAL_SLEEP_S / 2)  # ...and its time is not training time


class SlowFirstBatch(BoringModel):
    """A first training batch that takes VAL_SLEEP_S (allocation, compilation): the warm-up the table leaves out."""

    def training_step(self, batch, batch_idx):
        if self.global_step == 0:
            time.sleep(VAL_SLEEP_S)
        return super().training_step(batch, batch_idx)


def test_the_plotted_throughput_is_the_tables_throughput(tmp_path):
    """The results table's images/s (ThroughputCallback: warm-up batches left out) and report.png's point for the
    same epoch must be one number; a 3-step toy run plotted 9 img/s beside the table's 42."""
    history, throughput = RunHistory(), ThroughputCallback(skip_batches=1)
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        limit_train_batches=6,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[history, throughput],
    )
    trainer.fit(SlowFirstBatch())
    (row,) = [row for row in history.epochs if "images_per_sec" in row]
    assert row["images_per_sec"] == pytest.approx(throughput.images_per_sec(trainer.world_size), rel=1e-12)
    assert row["images_per_sec"] > throughput.images / VAL_SLEEP_S  # the slow first batch is not in its time
