"""FFCVDataModule under Lightning DDP (2 CPU processes, gloo): every sample once per epoch across ranks, and
a run resumed from a mid-epoch checkpoint trains on exactly the batches the uninterrupted run had left.

Labels are sample indices, so the labels a rank trained on say which samples it saw.
"""

import json
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from ffcv.fields import IntField, RGBImageField
from ffcv.writer import DatasetWriter
from helpers import free_port
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_lars.data.ffcv_datamodule import FFCVDataModule

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]

NUM_TRAIN, NUM_VAL, BATCH = 52, 9, 4  # 2 ranks x 4 = 8 per step: 6 steps per epoch, 4 samples dropped


class IndexedImages:
    def __init__(self, count):
        self.count = count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        return rng.integers(0, 256, size=(40, 56, 3), dtype=np.uint8), index


class RecordingClassifier(L.LightningModule):
    """A linear probe on pooled pixels that writes down which samples each rank trained and validated on."""

    def __init__(self, out_dir: str):
        super().__init__()
        self.out_dir = out_dir
        self.head = torch.nn.Linear(3, NUM_TRAIN)
        self.seen = {"train": [], "val": []}

    def training_step(self, batch, batch_idx):
        images, labels = batch
        self.seen["train"].append([self.current_epoch, self.global_step, labels.tolist()])
        return torch.nn.functional.cross_entropy(self.head(images.mean(dim=(2, 3))), labels)

    def validation_step(self, batch, batch_idx):
        self.seen["val"].append([self.current_epoch, batch[1].tolist()])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_fit_end(self):
        Path(self.out_dir, f"rank{self.global_rank}.json").write_text(json.dumps(self.seen))


def fit(betons, out_dir, ckpt_dir, monkeypatch, ckpt_path=None):
    out_dir.mkdir(parents=True)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    datamodule = FFCVDataModule(
        *betons,
        num_classes=NUM_TRAIN,
        batch_size=BATCH,
        seed=11,
        num_workers=1,
        resolution=32,
        val_resolution=32,
    )
    checkpoints = ModelCheckpoint(dirpath=ckpt_dir, filename="{step}", every_n_train_steps=1, save_top_k=-1)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_epochs=2,
        logger=False,
        callbacks=[checkpoints],
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(RecordingClassifier(str(out_dir)), datamodule=datamodule, ckpt_path=ckpt_path)
    return [json.loads(Path(out_dir, f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def betons(tmp_path_factory):
    root = tmp_path_factory.mktemp("betons")
    paths = root / "train.beton", root / "val.beton"
    for path, count in zip(paths, (NUM_TRAIN, NUM_VAL)):
        fields = {"image": RGBImageField(max_resolution=64), "label": IntField()}
        DatasetWriter(str(path), fields, num_workers=1).from_indexed_dataset(IndexedImages(count))
    return paths


def test_ddp_epochs_and_mid_epoch_resume(betons, tmp_path, monkeypatch):
    ranks = fit(betons, tmp_path / "full", tmp_path / "ckpt", monkeypatch)
    steps_per_epoch = NUM_TRAIN // (BATCH * 2)
    for epoch in (0, 1):
        per_rank = [[labels for e, _, labels in rank["train"] if e == epoch] for rank in ranks]
        assert [len(batches) for batches in per_rank] == [steps_per_epoch] * 2
        assert all(len(labels) == BATCH for batches in per_rank for labels in batches)  # exact global batch
        seen = [label for batches in per_rank for labels in batches for label in labels]
        assert len(seen) == len(set(seen)) == steps_per_epoch * BATCH * 2  # each kept sample exactly once
    epoch_sets = [
        {label for e, _, labels in ranks[0]["train"] + ranks[1]["train"] if e == epoch for label in labels}
        for epoch in (0, 1)
    ]
    assert epoch_sets[0] != epoch_sets[1]  # reshuffled per epoch: a different 4 samples dropped (or order)
    for epoch in (0, 1):  # validation: every val sample once across ranks, no padding duplicates
        val_seen = [label for rank in ranks for e, labels in rank["val"] if e == epoch for label in labels]
        assert sorted(val_seen) == list(range(NUM_VAL))

    # Resume after step 8: epoch 1 had consumed 2 of its 6 batches on each rank.
    resumed = fit(
        betons,
        tmp_path / "resumed",
        tmp_path / "ckpt2",
        monkeypatch,
        ckpt_path=str(tmp_path / "ckpt" / "step=8.ckpt"),
    )
    for full_rank, resumed_rank in zip(ranks, resumed):
        expected = [labels for e, step, labels in full_rank["train"] if e == 1 and step >= 8]
        assert [labels for _, _, labels in resumed_rank["train"]] == expected
        assert [step for _, step, _ in resumed_rank["train"]] == list(range(8, 12))
