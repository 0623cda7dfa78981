"""data.decode=device for .beton files (lightning_lars/data/beton_device_decode.py) against FFCV's CPU path of the
same seed, through the real FFCVDataModule on a small .beton holding both JPEG and raw images: the very crop
boxes and flips the CPU path's jitted decoder draws (recorded from inside FFCV's pipeline), pixels within the
measured gap between OpenCV's INTER_AREA (FFCV) and torchvision's antialiased bilinear, and a mid-epoch resume
that repeats the unbroken run bit for bit. On this CPU the batch decodes with libjpeg-turbo; only the nvJPEG call
is left to the GPU."""

from __future__ import annotations

import io

import ffcv.fields.rgb_image as ffcv_rgb_image
import numpy as np
import pytest
import torch
from ffcv.fields import IntField, RGBImageField
from ffcv.reader import Reader
from ffcv.writer import DatasetWriter
from PIL import Image

from lightning_lars.core.errors import UserError
from lightning_lars.data import pipelines, seeded_ops
from lightning_lars.data.beton_device_decode import HEADER_BYTES, max_stored_bytes, rows_to_encoded
from lightning_lars.data.epoch_loader import EpochProgress
from lightning_lars.data.ffcv_datamodule import FFCVDataModule

# numba's dispatcher finalizer prints KeyError noise at teardown after FFCV ran (numba 0.68, FFCV 1.0.2): not a failure.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

NUM_IMAGES, BATCH, SEED, RESOLUTION = 24, 8, 3, 32
MAX_RESOLUTION = 64  # px, the stored images' longer side at most
CPU = torch.device("cpu")
STD = torch.tensor(pipelines.IMAGENET_STD).view(1, 3, 1, 1)


class PhotoLikeImages:
    """Smooth gradients with mild noise (as photos: JPEG and resize errors stay small), 40-90 px a side;
    label = sample index, so every output matches its sample whatever the order."""

    def __len__(self):
        return NUM_IMAGES

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        height, width = (int(v) for v in rng.integers(40, 90, size=2))
        y, x = np.mgrid[0:height, 0:width]
        image = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height) + 64], -1)
        return np.clip(image + rng.normal(0, 5, image.shape), 0, 255).astype(np.uint8), index


@pytest.fixture(scope="module")
def beton(tmp_path_factory):
    return write_beton(tmp_path_factory.mktemp("beton_device") / "images.beton")


def write_beton(path):
    """Half JPEG, half raw (FFCV's 'proportion' mode, as ``make prepare`` writes ImageNet)."""
    np.random.seed(0)  # the writer draws each image's jpg/raw choice from numpy's global generator
    image = RGBImageField(write_mode="proportion", compress_probability=0.5, max_resolution=MAX_RESOLUTION)
    DatasetWriter(str(path), {"image": image, "label": IntField()}, num_workers=1).from_indexed_dataset(
        PhotoLikeImages()
    )
    modes = Reader(str(path)).metadata["f0"]["mode"]
    assert set(modes.tolist()) == {0, 1}  # both kinds present, or the test covers one path only
    return path


def make_module(beton, decode, **options):
    settings = {"batch_size": BATCH, "seed": SEED, "num_workers": 1, "resolution": RESOLUTION}
    module = FFCVDataModule(
        beton, beton, num_classes=NUM_IMAGES, val_resolution=24, decode=decode, **{**settings, **options}
    )
    module.setup("fit")
    return module


@pytest.fixture(scope="module")
def device_module(beton):
    return make_module(beton, "device")


@pytest.fixture(scope="module")
def cpu_module(beton):
    return make_module(beton, "cpu")


def epoch_batches(module, split, epoch=0, device=CPU):
    """(images, labels) per batch of ``split``, decoded where needed (on ``device``) and copied (FFCV reuses its
    buffers)."""
    if split == "train":
        module.load_state_dict({"epoch": epoch, "samples_consumed": 0})
    loader = module.train_dataloader() if split == "train" else module.val_dataloader()
    batches = []
    for batch in loader:
        if module.decode == "device":
            batch = module.decode_batch(batch, device, split)
        batches.append((batch[0].clone(), batch[1].clone()))
    return batches


def record_box(source, start_row, end_row, start_col, end_col, destination):
    """Stands in for FFCV's ``resize_crop`` inside the CPU path's jitted decoders: writes the box it is handed
    (top, left, height, width; px < 256 here) into the first pixel and zeros elsewhere, so a flip moves it."""
    destination[:] = 0
    destination[0, 0, 0], destination[0, 0, 1] = start_row, start_col
    destination[0, 0, 2], destination[1, 0, 0] = end_row - start_row, end_col - start_col


@pytest.fixture(scope="module")
def recording_module(beton):
    """FFCV's CPU path with a box-recording resize compiled into both splits' decoders (compiled here, under the
    patch; the jitted code keeps it after the patch is undone)."""
    pipeline = {
        "train": ["random_resized_crop", "flip", "to_tensor", "to_torch_image", {"normalize": "imagenet"}],
        "val": [{"center_crop": {"ratio": 0.875}}, "to_tensor", "to_torch_image", {"normalize": "imagenet"}],
    }
    module = FFCVDataModule(
        beton, beton, num_classes=NUM_IMAGES, batch_size=BATCH, seed=SEED, num_workers=1, pipeline=pipeline
    )
    module.setup("fit")
    module._post_transfer = {"train": None, "val": None}  # keep the recorded integers
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seeded_ops, "resize_crop", record_box)  # the seeded random crop's resize
        patch.setattr(ffcv_rgb_image, "resize_crop", record_box)  # FFCV's centre crop's resize
        module._train_loader_for_epoch(0)
        module.val_dataloader().loader_for_epoch(0)
    return module


def cpu_paths_draws(module, split, epoch):
    """Sample index -> (top, left, height, width, flipped) as the CPU path draws them, read from its output."""
    draws = {}
    for images, labels in epoch_batches(module, split, epoch):
        for image, label in zip(images, labels.tolist(), strict=True):
            flipped = bool(image[2, 0, -1] > 0)  # the box's height, never 0, moved to the last column
            column = -1 if flipped else 0
            top, left, height = image[:, 0, column].tolist()
            draws[label] = (top, left, height, int(image[0, 1, column]), flipped)
    return draws


def device_paths_draws(module, split, epoch):
    if split == "train":
        module.load_state_dict({"epoch": epoch, "samples_consumed": 0})
    loader = module.train_dataloader() if split == "train" else module.val_dataloader()
    draws = {}
    for rows, labels in loader:
        encoded = rows_to_encoded(rows, split)
        for box, flip, label in zip(
            encoded.boxes.tolist(), encoded.flips.tolist(), labels.tolist(), strict=True
        ):
            draws[label] = (*box, flip)
    return draws


@pytest.mark.parametrize(("split", "epoch"), [("train", 0), ("train", 1), ("val", 0)])
def test_the_rows_carry_the_cpu_paths_own_boxes_and_flips(recording_module, device_module, split, epoch):
    expected = cpu_paths_draws(recording_module, split, epoch)
    got = device_paths_draws(device_module, split, epoch)
    assert got == expected
    if split == "train":  # not vacuous: boxes differ between samples, and both flip outcomes occur
        assert len({draw[:4] for draw in got.values()}) > len(got) // 2
        assert {draw[4] for draw in got.values()} == {True, False}
    else:
        assert not any(draw[4] for draw in got.values())


def test_the_rows_hold_the_files_stored_bytes(beton, device_module):
    """JPEG rows decode (by PIL, an outside decoder) to the stored size; raw rows are the stored pixels."""
    reader = Reader(str(beton))
    rows, labels = next(iter(device_module.val_dataloader()))
    encoded = rows_to_encoded(rows, "val")
    assert rows.shape[1] == HEADER_BYTES + max_stored_bytes(str(beton))
    for data, label in zip(encoded.data, labels.tolist(), strict=True):
        mode, width, height, _ = reader.metadata["f0"][label]
        # what FFCV's writer stored
        image = ffcv_rgb_image.resizer(PhotoLikeImages()[label][0], MAX_RESOLUTION)
        if mode == 0:
            decoded = np.asarray(Image.open(io.BytesIO(data.numpy().tobytes())).convert("RGB"))
            assert decoded.shape == (height, width, 3)
            assert np.abs(decoded.astype(int) - image).mean() < 3  # quality-90 JPEG of the written image
        else:
            assert torch.equal(data, torch.from_numpy(image).permute(2, 0, 1))


def test_raw_images_outlive_ffcvs_buffer(device_module):
    """FFCV's thread rewrites its buffer once the next batch is taken, while a GPU copy of the raw images may still
    be queued: they are copies, and rewriting the rows leaves them as they were."""
    rows, _ = next(iter(device_module.val_dataloader()))
    rows = rows.clone()  # stands in for FFCV's buffer
    encoded = rows_to_encoded(rows, "val")
    raw = [item for item in encoded.data if item.dim() == 3]
    before = [item.clone() for item in raw]
    assert raw, "no raw image in the batch: the test would cover nothing"
    rows.fill_(7)
    assert all(torch.equal(item, kept) for item, kept in zip(raw, before, strict=True))


@pytest.mark.parametrize("split", ["train", "val"])
def test_pixels_agree_with_ffcvs_cpu_path_within_the_resize_gap(cpu_module, device_module, split):
    """FFCV resizes with OpenCV's INTER_AREA, this path with torchvision's antialiased bilinear: measured here,
    at most 4 of 255 apart and 0.4-0.7 on average (pixel units). A box or flip off by a pixel moves whole
    gradients and breaks the mean bound."""
    for (cpu_images, cpu_labels), (images, labels) in zip(
        epoch_batches(cpu_module, split), epoch_batches(device_module, split), strict=True
    ):
        assert torch.equal(labels, cpu_labels) and images.shape == cpu_images.shape
        levels = ((images - cpu_images) * STD).abs()  # pixel units (0-255)
        assert float(levels.max()) <= 6 and float(levels.mean()) < 1.0
        assert images.dtype == torch.float32 and images.is_contiguous(memory_format=torch.channels_last)


def test_a_mid_epoch_resume_yields_the_remaining_batches_bit_for_bit(beton, device_module):
    unbroken = epoch_batches(device_module, "train", epoch=1)
    resumed = make_module(beton, "device")
    resumed.load_state_dict({"epoch": 1, "samples_consumed": BATCH})
    loader = resumed.train_dataloader()
    rest = [resumed.decode_batch(batch, CPU, "train") for batch in loader]
    assert len(rest) == len(unbroken) - 1 == 2
    for (images, labels), (expected_images, expected_labels) in zip(rest, unbroken[1:], strict=True):
        assert torch.equal(images, expected_images) and torch.equal(labels, expected_labels)
    assert resumed.progress == EpochProgress(epoch=2, samples_consumed=0)


def test_the_train_resolution_follows_the_progressive_schedule(beton):
    module = make_module(
        beton, "device", resolution={"start": 32, "end": 64, "start_ramp_epoch": 0, "end_ramp_epoch": 1}
    )
    sides = [epoch_batches(module, "train", epoch)[0][0].shape[-1] for epoch in (0, 1)]
    assert sides == [32, 64]


def test_a_bad_decode_value_names_the_choices(beton):
    with pytest.raises(UserError, match="data.decode must be one of cpu, device, got 'gpu'"):
        FFCVDataModule(beton, beton, num_classes=2, decode="gpu")


def test_the_command_line_selects_the_device_path_for_beton_groups():
    from lightning_lars.config.jobs import compose_job

    for group in ("imagenet", "demo"):
        assert compose_job([f"data={group}"]).data.decode == "cpu"  # today's behaviour stays the default
        assert compose_job([f"data={group}", "data.decode=device"]).data.decode == "device"
