"""ThroughputCallback's timed spans end where Lightning itself writes metrics (its log steps, seen by a logger of
Lightning's own kind) and at the run's last step: there, on CUDA, the clock waits for the GPU."""

import csv

import lightning as L
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger
from lightning_lars.callbacks.monitors.throughput import ThroughputCallback, ends_a_timed_span


class SpanEnds(L.Callback):
    def __init__(self):
        self.steps = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if ends_a_timed_span(trainer):
            self.steps.append(trainer.global_step)


class LogsEveryStep(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train/loss", out["loss"])
        return out


@pytest.mark.parametrize(
    "limits, last",
    [({"max_steps": 10}, 10), ({"max_epochs": 2, "limit_train_batches": 7}, 14)],
)
def test_spans_end_at_lightnings_log_steps_and_at_the_last_step(tmp_path, limits, last):
    spans, logger = SpanEnds(), CSVLogger(tmp_path, name="csv")
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        log_every_n_steps=4,
        limit_val_batches=0,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[spans, ThroughputCallback(skip_batches=1)],
        **limits,
    )
    trainer.fit(LogsEveryStep())
    with (tmp_path / "csv" / "version_0" / "metrics.csv").open() as metrics:
        # Lightning's step column counts steps done before the write: the write after step 4 says 3
        written = sorted({int(row["step"]) + 1 for row in csv.DictReader(metrics) if row["train/loss"]})
    assert len(written) >= 2 and written[-1] < last  # log steps, and a last step that is not one
    assert spans.steps == [*written, last]
