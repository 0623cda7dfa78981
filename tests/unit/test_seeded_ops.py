"""Seeded random crop and flip: a sample's augmented pixels depend only on (seed, epoch, sample index).

Through the real FFCVDataModule on a small .beton of random-size noise images whose label is the sample index,
so every output image can be matched to its sample whatever the order, batch size or thread count.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ffcv.fields import IntField, RGBImageField
from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder
from ffcv.transforms import RandomHorizontalFlip
from ffcv.writer import DatasetWriter

from lightning_lars.core.errors import UserError
from lightning_lars.data import ffcv_ops, pipelines, seeded_ops
from lightning_lars.data.epoch_loader import EpochProgress, FFCVEpochLoader
from lightning_lars.data.ffcv_datamodule import FFCVDataModule
from lightning_lars.data.pipelines import DEFAULT_PIPELINE

ROOT = Path(__file__).resolve().parents[2]
NUM_IMAGES, RESOLUTION, SEED = 24, 24, 3
NO_FLIP = [op for op in DEFAULT_PIPELINE["train"] if op != "flip"]


class IndexedImages:
    """Random-size noise images (so crops differ in position and shape); label = sample index."""

    def __len__(self):
        return NUM_IMAGES

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        height, width = rng.integers(40, 90, size=2)
        return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8), index


@pytest.fixture(scope="module")
def beton(tmp_path_factory):
    path = tmp_path_factory.mktemp("seeded") / "images.beton"
    fields = {"image": RGBImageField(max_resolution=64), "label": IntField()}
    DatasetWriter(str(path), fields, num_workers=1).from_indexed_dataset(IndexedImages())
    return path


def make_module(beton, *, seed=SEED, batch_size=8, num_workers=1, train=None):
    pipeline = {"train": train or DEFAULT_PIPELINE["train"], "val": DEFAULT_PIPELINE["val"]}
    module = FFCVDataModule(
        beton,
        beton,
        num_classes=NUM_IMAGES,
        batch_size=batch_size,
        seed=seed,
        num_workers=num_workers,
        resolution=RESOLUTION,
        order="sequential",
        pipeline=pipeline,
    )
    module.setup("fit")
    return module


@pytest.fixture(scope="module")
def module(beton):
    """The reference DataModule (seed 3, batches of 8, one FFCV thread): one compile shared by the tests."""
    return make_module(beton)


def epoch_images(module, epoch, order=None):
    """Sample index -> augmented image of ``epoch`` (copied: FFCV reuses its batch buffers).

    ``order``: the sample order to load in (default: the module's own, sequential here)."""
    order_for_epoch = module._train_order if order is None else (lambda loader, e: order)
    loader = FFCVEpochLoader(
        module._train_loader_for_epoch,
        order_for_epoch,
        NUM_IMAGES,
        rank=0,
        world_size=1,
        batch_size=module.batch_size,
        drop_last=False,
        progress=EpochProgress(epoch=epoch),
    )
    images = {}
    for batch_images, labels in loader:
        images.update(zip(labels.tolist(), batch_images.clone()))
    assert sorted(images) == list(range(NUM_IMAGES))
    return images


def assert_same_images(got, expected):
    for index, image in expected.items():
        assert torch.equal(got[index], image), f"sample {index}"


def test_same_seed_and_epoch_repeat_bitwise_across_loader_instances(beton, module):
    first, second = module, make_module(beton)  # two Loaders, each compiled on its own
    epoch_1 = epoch_images(first, 1)
    assert_same_images(epoch_images(second, 1), epoch_1)
    # back to an earlier epoch on the same compiled loader: the epoch reaches the jitted code without recompiling
    epoch_0 = epoch_images(first, 0)
    assert_same_images(epoch_images(second, 0), epoch_0)
    assert_same_images(epoch_images(first, 1), epoch_1)


def test_another_epoch_or_seed_gives_other_crops(beton, module):
    epoch_0, epoch_1 = epoch_images(module, 0), epoch_images(module, 1)
    other_seed = epoch_images(make_module(beton, seed=SEED + 1), 0)
    for index in range(NUM_IMAGES):  # continuous crop boxes: an identical output would be a coincidence
        assert not torch.equal(epoch_0[index], epoch_1[index]), f"sample {index}"
        assert not torch.equal(epoch_0[index], other_seed[index]), f"sample {index}"


def test_a_samples_crop_ignores_its_position_the_batch_size_and_the_thread_count(beton, module):
    reference = epoch_images(module, 2)  # batches of 8, one thread
    shuffled = np.random.default_rng(0).permutation(NUM_IMAGES).astype(np.int64)
    # 2 FFCV threads (numba prange): samples of a batch are decoded on both threads, in any interleaving
    moved = epoch_images(make_module(beton, batch_size=5, num_workers=2), 2, order=shuffled)
    assert_same_images(moved, reference)


def test_flip_is_a_per_sample_coin_independent_of_the_crop(beton, module):
    flipped = epoch_images(module, 0)
    plain = epoch_images(make_module(beton, train=NO_FLIP), 0)  # same crops: the crop has its own stream
    was_flipped = []
    for index in range(NUM_IMAGES):
        mirrored = torch.flip(plain[index], dims=[-1])  # NCHW: width is the last dimension
        assert torch.equal(flipped[index], plain[index]) or torch.equal(flipped[index], mirrored), index
        was_flipped.append(torch.equal(flipped[index], mirrored))
    assert 0 < sum(was_flipped) < NUM_IMAGES  # prob 0.5 on 24 samples: all or none is a 1-in-8-million event


SUBPROCESS = """
import hashlib, sys
sys.path.insert(0, {tests!r})
from test_seeded_ops import epoch_images, make_module
images = epoch_images(make_module({beton!r}), 1)
print(hashlib.sha256(b"".join(images[i].numpy().tobytes() for i in sorted(images))).hexdigest())
"""


def test_a_separate_process_produces_the_same_bytes(beton, module):
    images = epoch_images(module, 1)
    expected = hashlib.sha256(b"".join(images[i].numpy().tobytes() for i in sorted(images))).hexdigest()
    script = SUBPROCESS.format(tests=str(Path(__file__).parent), beton=str(beton))
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == expected


def test_build_image_ops_seeds_random_ops_only_when_given_a_seed():
    ops = pipelines.parse_pipeline("train", DEFAULT_PIPELINE["train"])
    seeded = ffcv_ops.build_image_ops(ops, 32, torch.device("cpu"), seed=7)
    assert isinstance(seeded[0], seeded_ops.SeededRandomResizedCropRGBImageDecoder)
    assert isinstance(seeded[1], seeded_ops.SeededRandomHorizontalFlip)
    assert seeded[0].seed == seeded[1].seed == 7
    assert (seeded[0].scale, seeded[0].output_size, seeded[1].flip_prob) == ((0.08, 1.0), (32, 32), 0.5)
    unseeded = ffcv_ops.build_image_ops(ops, 32, torch.device("cpu"))
    assert type(unseeded[0]) is RandomResizedCropRGBImageDecoder and type(unseeded[1]) is RandomHorizontalFlip
    ffcv_ops.check_ffcv_op_order(seeded)  # the seeded ops count as jitted: the hang guard still applies


def test_sample_seeds_spread_over_indices_epochs_and_seeds():
    keys = [seeded_ops.epoch_key(seed, epoch, seeded_ops.CROP_SALT) for seed in (0, 1) for epoch in (0, 1)]
    assert len(set(keys)) == 4
    assert seeded_ops.epoch_key(0, 0, seeded_ops.CROP_SALT) != seeded_ops.epoch_key(
        0, 0, seeded_ops.FLIP_SALT
    )
    seeds = {int(seeded_ops.sample_seed(key, np.uint64(index))) for key in keys for index in range(1000)}
    assert len(seeds) == 4000  # no two (key, index) pairs share a stream here


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_a_bad_seed_is_a_user_error(seed):
    with pytest.raises(UserError, match="seed must be a non-negative integer"):
        seeded_ops.SeededRandomHorizontalFlip(0.5, seed=seed)
