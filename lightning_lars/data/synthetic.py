"""Generated batches of the recipe's shape, no files and no decoding: for throughput work on the model alone.

``make recipe=goyal_8k data=synthetic`` times the recipe's model, optimizer, precision and strategy with the
input pipeline taken out (what the loader can feed is measured separately: ``make bench-data``). Each rank
draws a small pool of batches once (normalised images ~ N(0, 1), uniform labels) from (seed, rank) and cycles
through it, so a step costs what training costs minus the loader. Accuracy on it means nothing (chance).

The pool lives on the run's device, in the dtype and memory layout the real loaders hand over (FFCV's
``to_device`` puts float32 channels-last batches there; with ``normalize`` after ``to_device``, uint8 batches
normalised on the device): a pool in pageable host memory made every step wait for a synchronous copy
(245 MB a step at 408 images of 224 px), and images/s timed that copy, not the model.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping

import lightning as L
import torch

from lightning_lars.core.errors import UserError
from lightning_lars.data.pipelines import IMAGENET_MEAN, IMAGENET_STD, TorchNormalize
from lightning_lars.data.resolution import resolution_schedule

IMAGENET_TRAIN_IMAGES = 1_281_167  # ILSVRC-2012 train split
IMAGENET_VAL_IMAGES = 50_000


class SyntheticBatches:
    """``num_batches`` batches cycled from a pool of ``pool_size`` generated ones; re-iterable (one per epoch)."""

    def __init__(self, pool: list[tuple[torch.Tensor, torch.Tensor]], num_batches: int):
        self.pool, self.num_batches = pool, num_batches

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return (self.pool[i % len(self.pool)] for i in range(self.num_batches))


class SyntheticDataModule(L.LightningDataModule):
    """Random images and labels with the shapes and memory layout the recipe's real loader would give.

    Args:
        num_classes: label range.
        batch_size: images per device per step (set by the batch plan).
        seed: with the rank, seeds the generated pool.
        num_train_images: the epoch length it stands for (default: ImageNet-1k's 1,281,167), which sets the
            steps per epoch and so the LR schedule, as on the real data.
        num_val_images: likewise for validation (default 50,000).
        resolution: train side in px; a progressive schedule keeps its first size (with a warning).
        val_resolution: eval side in px (default: ``resolution``).
        pipeline: the recipe's ops, read only for the layout: ``channels_last`` in the train ops gives
            channels-last tensors, as the FFCV and torchvision loaders do.
        pool_size: distinct batches generated per rank (memory: pool_size x batch x 3 x res^2 x 4 bytes).
        no_aug_from_epoch: accepted so recipes that set it compose; it has nothing to switch off here.
    """

    def __init__(
        self,
        num_classes: int = 1000,
        batch_size: int = 256,
        seed: int = 0,
        num_train_images: int = IMAGENET_TRAIN_IMAGES,
        num_val_images: int = IMAGENET_VAL_IMAGES,
        resolution: int | Mapping = 224,
        val_resolution: int | None = None,
        pipeline: Mapping[str, list] | None = None,
        pool_size: int = 4,
        no_aug_from_epoch: int | None = None,
    ):
        super().__init__()
        if min(num_classes, batch_size, num_train_images, num_val_images, pool_size) < 1:
            raise UserError(
                "data=synthetic needs num_classes, num_train_images, num_val_images and pool_size >= 1"
            )
        schedule = resolution_schedule(resolution)
        if schedule.is_progressive:
            warnings.warn(
                f"data=synthetic keeps the first resolution ({schedule.start} px) for every epoch;"
                " progressive resizing needs a real loader",
                stacklevel=2,
            )
        if no_aug_from_epoch is not None:
            warnings.warn(
                "data.no_aug_from_epoch has no effect on synthetic data (no augmentation)", stacklevel=2
            )
        train_ops = (pipeline or {}).get("train") or ["channels_last"]
        names = [op if isinstance(op, str) else next(iter(op)) for op in train_ops]
        self.channels_last = "channels_last" in names
        # the GPU variant of the real pipelines: uint8 to the device, normalised there (pipelines.py)
        on_device = "normalize" in names and "to_device" in names
        self.normalize = (
            TorchNormalize(IMAGENET_MEAN, IMAGENET_STD)
            if on_device and names.index("normalize") > names.index("to_device")
            else None
        )
        self.num_classes, self.batch_size, self.seed = int(num_classes), int(batch_size), int(seed)
        self._num_train, self._num_val, self.pool_size = (
            int(num_train_images),
            int(num_val_images),
            int(pool_size),
        )
        self.resolution = schedule.start
        self.val_resolution = int(val_resolution or schedule.start)

    @property
    def num_train_images(self) -> int:
        return self._num_train

    @property
    def num_val_images(self) -> int:
        return self._num_val

    def _world(self) -> tuple[int, int, torch.device]:
        trainer = self.trainer
        if trainer is None:
            return 0, 1, torch.device("cpu")
        return trainer.global_rank, trainer.world_size, trainer.strategy.root_device

    def _batches(self, split: int, resolution: int, num_images: int, drop_last: bool) -> SyntheticBatches:
        rank, world_size, device = self._world()
        # drawn on the CPU from (seed, rank): the same pool on every device type
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + rank * 2 + split)
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        shape = (self.batch_size, 3, resolution, resolution)
        pool = []
        for _ in range(self.pool_size):
            if self.normalize is None:
                images = torch.randn(shape, generator=generator)
            else:
                images = torch.randint(256, shape, generator=generator, dtype=torch.uint8)
            labels = torch.randint(self.num_classes, (self.batch_size,), generator=generator)
            pool.append((images.contiguous(memory_format=memory_format).to(device), labels.to(device)))
        per_rank = num_images // world_size
        num_batches = per_rank // self.batch_size if drop_last else -(-per_rank // self.batch_size)
        return SyntheticBatches(pool, max(1, num_batches))

    def train_dataloader(self) -> SyntheticBatches:
        return self._batches(0, self.resolution, self._num_train, drop_last=True)

    def val_dataloader(self) -> SyntheticBatches:
        return self._batches(1, self.val_resolution, self._num_val, drop_last=False)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """The GPU variant's normalisation on the device, as the FFCV DataModule does it."""
        if self.normalize is None:
            return batch
        images, labels = batch
        return self.normalize(images), labels
