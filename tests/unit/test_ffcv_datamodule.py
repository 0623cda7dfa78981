"""FFCVDataModule on CPU: header counts, file errors, exact shards across ranks, mid-epoch resume, resizing.

Test betons store each sample's index as its label, so a batch's labels say which samples it holds.
"""

import itertools

import numpy as np
import pytest
import torch
from ffcv.fields import IntField, RGBImageField
from ffcv.writer import DatasetWriter

from lightning_lars.core.errors import UserError
from lightning_lars.data.epoch_loader import EpochProgress, FFCVEpochLoader, epoch_order, shard
from lightning_lars.data.ffcv_datamodule import FFCVDataModule
from lightning_lars.data.holdout import holdout_split
from lightning_lars.data.resolution import resolution_schedule
from lightning_lars.data.val_order import val_order

# numba's dispatcher finalizer prints KeyError noise at teardown after FFCV ran (numba 0.68, FFCV 1.0.2): not a failure.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

NUM_TRAIN, NUM_VAL = 45, 9  # val: batches of 8 and 1  # 45 = 2 global batches of 2 x 8, plus 13 dropped


class IndexedImages:
    """Random-size noise images; label = sample index."""

    def __init__(self, count):
        self.count = count

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        height, width = rng.integers(40, 90, size=2)
        return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8), index


def write_beton(path, count):
    fields = {"image": RGBImageField(max_resolution=64), "label": IntField()}
    DatasetWriter(str(path), fields, num_workers=1).from_indexed_dataset(IndexedImages(count))
    return path


@pytest.fixture(scope="module")
def betons(tmp_path_factory):
    root = tmp_path_factory.mktemp("betons")
    return write_beton(root / "train.beton", NUM_TRAIN), write_beton(root / "val.beton", NUM_VAL)


@pytest.fixture(scope="module")
def datamodule(betons):
    """One DataModule (one FFCV compile per split) shared by the loader tests."""
    module = FFCVDataModule(
        *betons, num_classes=NUM_TRAIN, batch_size=8, seed=3, num_workers=1, resolution=32, val_resolution=48
    )
    module.setup("fit")
    return module


def rank_loader(module, rank, world_size, progress=None):
    return FFCVEpochLoader(
        module._train_loader_for_epoch,
        module._train_order,
        module.num_train_images,
        rank=rank,
        world_size=world_size,
        batch_size=module.batch_size,
        drop_last=True,
        progress=progress or EpochProgress(),
    )


def labels(loader, limit=None):
    """Labels batch by batch (the first ``limit`` batches); copied at once: FFCV reuses its batch buffers."""
    return [batch_labels.tolist() for _, batch_labels in itertools.islice(loader, limit)]


def test_counts_come_from_the_header(betons):
    module = FFCVDataModule(*betons, num_classes=10)
    assert (module.num_train_images, module.num_val_images) == (NUM_TRAIN, NUM_VAL)
    assert module.steps_per_epoch(world_size=2) == NUM_TRAIN // (256 * 2)


def test_missing_file_names_the_prepare_command(tmp_path):
    module = FFCVDataModule(
        tmp_path / "train.beton",
        tmp_path / "val.beton",
        num_classes=10,
        prepare_command="make prepare src=x out=y",
    )
    with pytest.raises(
        UserError, match=r"dataset file .*train.beton not found: prepare it with make prepare"
    ):
        _ = module.num_train_images
    with pytest.raises(UserError, match="not found"):
        module.setup("fit")


def test_truncated_file_is_a_one_line_user_error(betons, tmp_path):
    data = betons[0].read_bytes()
    for cut in (10, len(data) - 5):
        damaged = tmp_path / f"cut{cut}.beton"
        damaged.write_bytes(data[:cut])
        module = FFCVDataModule(damaged, betons[1], num_classes=10, prepare_command="make prepare")
        with pytest.raises(UserError, match=r"cut\d+.beton is truncated .* make prepare") as error:
            _ = module.num_train_images
        assert "\n" not in str(error.value)


def test_quasi_random_refuses_more_than_one_process(betons):
    module = FFCVDataModule(*betons, num_classes=10, order="quasi_random")
    module.world_size = 2
    with pytest.raises(UserError, match="order=random"):
        module.setup("fit")
    with pytest.raises(UserError, match="data.order"):
        FFCVDataModule(*betons, num_classes=10, order="shuffled")


def test_epoch_order_depends_on_seed_and_epoch_only():
    first = epoch_order(100, seed=1, epoch=4, order="random")
    assert np.array_equal(first, epoch_order(100, seed=1, epoch=4, order="random"))
    assert not np.array_equal(first, epoch_order(100, seed=1, epoch=5, order="random"))
    assert not np.array_equal(first, epoch_order(100, seed=2, epoch=4, order="random"))
    assert sorted(first) == list(range(100))


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
def test_shards_are_disjoint_whole_global_batches(world_size):
    order = epoch_order(1000, seed=0, epoch=0, order="random")
    shards = [
        shard(order, rank=r, world_size=world_size, batch_size=16, drop_last=True) for r in range(world_size)
    ]
    kept = 1000 // (16 * world_size) * 16 * world_size
    assert sorted(np.concatenate(shards)) == sorted(order[:kept])
    for step in range(kept // (16 * world_size)):  # step j of every rank together = global batch j
        together = np.concatenate([s[step * 16 : (step + 1) * 16] for s in shards])
        assert sorted(together) == sorted(order[step * 16 * world_size : (step + 1) * 16 * world_size])


def test_gradient_accumulation_keeps_whole_optimizer_steps():
    order = epoch_order(1000, seed=0, epoch=0, order="random")
    shards = [
        shard(order, rank=r, world_size=2, batch_size=16, drop_last=True, accumulate_grad_batches=3)
        for r in range(2)
    ]
    assert [len(s) for s in shards] == [1000 // 96 * 48] * 2  # 10 steps of 3 micro-batches of 16 per rank
    resumed = shard(
        order,
        rank=0,
        world_size=2,
        batch_size=16,
        drop_last=True,
        accumulate_grad_batches=3,
        samples_consumed=4 * 32,
    )  # checkpoint after 4 micro-batches, inside step 2
    assert np.array_equal(resumed, shards[0][4 * 16 :])


def test_resumed_shard_is_the_unseen_tail_even_at_another_world_size():
    order = epoch_order(1000, seed=0, epoch=0, order="random")
    full = shard(order, rank=1, world_size=2, batch_size=16, drop_last=True)
    resumed = shard(order, rank=1, world_size=2, batch_size=16, drop_last=True, samples_consumed=5 * 32)
    assert np.array_equal(resumed, full[5 * 16 :])
    # Same global batch (32) on 4 ranks x 8: the union of what is left is the same set.
    four = [
        shard(order, rank=r, world_size=4, batch_size=8, drop_last=True, samples_consumed=5 * 32)
        for r in range(4)
    ]
    two = [
        shard(order, rank=r, world_size=2, batch_size=16, drop_last=True, samples_consumed=5 * 32)
        for r in range(2)
    ]
    assert sorted(np.concatenate(four)) == sorted(np.concatenate(two))


def test_val_shards_hold_every_sample_once_without_padding():
    order = np.arange(11)
    shards = [shard(order, rank=r, world_size=3, batch_size=4, drop_last=False) for r in range(3)]
    assert sorted(np.concatenate(shards)) == list(range(11))


def test_two_ranks_see_each_kept_sample_exactly_once_per_epoch(datamodule):
    for epoch in (0, 1):
        per_rank = []
        for rank in (0, 1):
            loader = rank_loader(datamodule, rank, 2, EpochProgress(epoch=epoch))
            batches = labels(loader)
            assert len(batches) == len(loader) == NUM_TRAIN // 16
            assert all(len(batch) == 8 for batch in batches)  # drop-last: global batch exactly 2 x 8
            per_rank.append(list(itertools.chain.from_iterable(batches)))
        seen = per_rank[0] + per_rank[1]
        assert len(seen) == len(set(seen)) == NUM_TRAIN // 16 * 16
        expected = epoch_order(NUM_TRAIN, seed=3, epoch=epoch, order="random")[: NUM_TRAIN // 16 * 16]
        assert sorted(seen) == sorted(expected)


def test_val_loader_yields_every_sample_once_with_a_short_last_batch(datamodule):
    batches = labels(datamodule.val_dataloader())
    assert [len(batch) for batch in batches] == [8, 1]  # the batch of one keeps its batch dimension
    assert sorted(itertools.chain.from_iterable(batches)) == list(range(9))
    assert labels(datamodule.val_dataloader()) == batches  # the same order in every evaluation
    assert len(datamodule.val_dataloader()) == 2


def test_a_partial_evaluation_samples_every_class():
    """Val images lie class by class (ImageFolder, and prepare's .beton files): the demo's 1000, 100 per class.
    The toy config's 2 batches of 32 read the first 64; in file order those are all class 0."""
    on_disk = np.repeat(np.arange(10), 100)
    order = val_order(1000)
    assert sorted(order.tolist()) == list(range(1000))  # a full pass still sees each image once
    assert len(set(on_disk[order[:64]].tolist())) == 10
    assert np.array_equal(order, val_order(1000))  # every run evaluates the same images


def test_mid_epoch_resume_continues_with_exactly_the_unseen_samples(datamodule, betons):
    datamodule.load_state_dict({"epoch": 1, "samples_consumed": 0})
    uninterrupted = labels(datamodule.train_dataloader())
    datamodule.load_state_dict({"epoch": 1, "samples_consumed": 0})
    first_part = labels(datamodule.train_dataloader(), limit=2)
    state = datamodule.state_dict()
    assert state == {"epoch": 1, "samples_consumed": 16}

    resumed = FFCVDataModule(
        *betons, num_classes=NUM_TRAIN, batch_size=8, seed=3, num_workers=1, resolution=32
    )
    resumed.load_state_dict(state)
    resumed.setup("fit")
    loader = resumed.train_dataloader()
    rest = labels(loader)
    assert first_part + rest == uninterrupted
    assert len(loader) == len(uninterrupted)  # len stays the full epoch, as Lightning counts it
    assert resumed.state_dict() == {"epoch": 2, "samples_consumed": 0}


def test_set_epoch_from_lightning_restarts_a_new_epoch_only():
    progress = EpochProgress(epoch=3, samples_consumed=48)
    progress.set_epoch(3)
    assert progress.samples_consumed == 48  # resuming the same epoch keeps the position
    progress.set_epoch(4)
    assert (progress.epoch, progress.samples_consumed) == (4, 0)


def test_progressive_resizing_changes_the_train_crop_per_epoch(datamodule):
    fixed = datamodule.resolution
    datamodule.resolution = resolution_schedule(
        {"start": 32, "end": 64, "start_ramp_epoch": 1, "end_ramp_epoch": 2}
    )
    try:
        sizes = {}
        for epoch in (0, 2):
            images, _ = next(iter(rank_loader(datamodule, 0, 1, EpochProgress(epoch=epoch))))
            sizes[epoch] = tuple(images.shape)
            assert images.dtype == torch.float32 and images.is_contiguous(memory_format=torch.channels_last)
    finally:
        datamodule.resolution = fixed
    assert sizes == {0: (8, 3, 32, 32), 2: (8, 3, 64, 64)}
    val_images, _ = next(iter(datamodule.val_dataloader()))
    assert tuple(val_images.shape) == (8, 3, 48, 48)  # higher-resolution eval


def test_no_aug_from_epoch_switches_to_the_val_crop_without_flip(datamodule):
    from ffcv.fields.rgb_image import CenterCropRGBImageDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.transforms import RandomHorizontalFlip

    datamodule.no_aug_from_epoch = 2
    try:
        augmented, plain = datamodule._train_loader_for_epoch(1), datamodule._train_loader_for_epoch(2)
        assert isinstance(augmented.pipeline_specs["image"].decoder, RandomResizedCropRGBImageDecoder)
        assert isinstance(plain.pipeline_specs["image"].decoder, CenterCropRGBImageDecoder)
        assert not any(
            isinstance(op, RandomHorizontalFlip) for op in plain.pipeline_specs["image"].transforms
        )
        first = [labels.tolist() for _, labels in rank_loader(datamodule, 0, 1, EpochProgress(epoch=2))]
        assert sorted(itertools.chain.from_iterable(first)) == sorted(
            epoch_order(NUM_TRAIN, seed=3, epoch=2, order="random")[:40]
        )
    finally:
        datamodule.no_aug_from_epoch = None


def test_a_held_out_share_of_train_is_evaluated_and_never_trained_on(betons):
    """Labels are sample indices: the train loader yields only the kept ones, the val loader exactly the held-out
    ones, read from train.beton (val.beton's 9 images would be labels 0-8 of another file)."""
    kept, held = holdout_split(NUM_TRAIN, 0.2, seed=5)
    assert len(held) == 9 and not set(kept) & set(held) and sorted([*kept, *held]) == list(range(NUM_TRAIN))
    module = FFCVDataModule(
        *betons, num_classes=NUM_TRAIN, batch_size=8, seed=3, num_workers=1, resolution=32, val_resolution=32,
        holdout=0.2, holdout_seed=5,
    )  # fmt: skip
    module.setup("fit")
    assert (module.num_train_images, module.num_val_images) == (36, 9)
    evaluated = sorted(itertools.chain.from_iterable(labels(module.val_dataloader())))
    assert evaluated == held.tolist()
    for epoch in (0, 1):
        trained = list(
            itertools.chain.from_iterable(labels(rank_loader(module, 0, 1, EpochProgress(epoch=epoch))))
        )
        assert len(trained) == 32 and set(trained) <= set(kept.tolist())  # 36 kept: 4 batches of 8
    # the draw is numpy's, from the seed alone: the same on every machine, another with another seed
    again = holdout_split(NUM_TRAIN, 0.2, seed=5)[1]
    want = np.sort(np.random.default_rng(5).permutation(NUM_TRAIN)[:9])
    assert again.tolist() == want.tolist() != holdout_split(NUM_TRAIN, 0.2, seed=6)[1].tolist()


@pytest.mark.parametrize("share", [0.0, 1.0, 0.001])
def test_a_held_out_share_that_keeps_nothing_is_a_one_line_error(share):
    with pytest.raises(UserError, match="data.holdout="):
        holdout_split(NUM_TRAIN, share, seed=0)
