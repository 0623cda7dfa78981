"""Baseline loader: torchvision ImageFolder + PIL through a standard DataLoader.

For comparison with the FFCV path (``make bench-data``) and for users without FFCV. It takes the same
``pipeline`` config as ``FFCVDataModule`` and maps each op to its torchvision twin, so both loaders apply the
same crop, flip and normalisation. The train loader is a torch ``DataLoader`` that shards the epoch itself
(the FFCV loader's order and whole steps, no padded ranks) and resumes mid-epoch exactly
(`lightning_lars.data.resumable_loader`). With ``decode="device"`` the workers only read the JPEG bytes and draw
the same crops and flips; each batch is decoded and cropped on the training device (`device_decode`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import datasets, transforms

from lightning_lars.core.errors import UserError
from lightning_lars.data import pipelines
from lightning_lars.data.checks import (
    PIL_DECODE_ERRORS,
    classes_message,
    missing_folder_message,
    no_aug_message,
    unreadable_image,
)
from lightning_lars.data.device_decode import (
    DECODE_CHOICES,
    DeviceImageOps,
    EncodedImages,
    EncodedSamples,
    collate_encoded,
)
from lightning_lars.data.resolution import resolution_schedule
from lightning_lars.data.resumable_loader import EpochSampler, ResumableDataLoader, SeededSamples
from lightning_lars.data.val_order import val_order
from lightning_lars.data.workers import default_num_workers


def load_rgb(path: str):
    """torchvision's default loader (a PIL image in RGB), with a file that does not decode named in one line."""
    try:
        return datasets.folder.default_loader(path)
    except PIL_DECODE_ERRORS as err:
        raise unreadable_image(path, err) from None


def torchvision_transform(ops: tuple[pipelines.Op, ...], resolution: int) -> transforms.Compose:
    """Validated pipeline ops -> the equivalent torchvision transform on PIL images (px, square crops)."""
    steps: list = []
    for op in ops:
        if op.name == "random_resized_crop":
            scale = tuple(float(x) for x in op.args["scale"])
            ratio = tuple(float(x) for x in op.args["ratio"])
            steps.append(transforms.RandomResizedCrop(resolution, scale=scale, ratio=ratio, antialias=True))
        elif op.name == "center_crop":
            # FFCV's centre crop takes ratio x short side, then resizes: resize short side to res / ratio first.
            ratio = float(op.args["ratio"])
            steps += [
                transforms.Resize(round(resolution / ratio), antialias=True),
                transforms.CenterCrop(resolution),
            ]
        elif op.name == "flip":
            steps.append(transforms.RandomHorizontalFlip(float(op.args["prob"])))
    steps.append(transforms.PILToTensor())
    normalize = next(op for op in ops if op.name == "normalize")
    mean, std = pipelines.normalize_stats("", normalize.args)  # pixel units, as FFCV's lookup table
    steps += [
        transforms.ConvertImageDtype(torch.float32),
        transforms.Normalize([m / 255 for m in mean], [s / 255 for s in std]),
    ]
    return transforms.Compose(steps)


class TorchvisionDataModule(L.LightningDataModule):
    """ImageFolder ``root/train`` and ``root/val`` (``<split>/<class>/<image>``) through torch DataLoaders.

    Args:
        root: the ImageFolder tree (what ``make prepare`` converts).
        num_classes: classes expected; checked against the train folder's classes.
        batch_size: images per device per step.
        seed: shuffling seed when not distributed (Lightning's sampler seeds itself under DDP).
        num_workers: loader processes; None = this process's CPU share (`workers.default_num_workers`).
        resolution: train px (an int: progressive resizing needs the FFCV DataModule).
        val_resolution: eval px.
        pipeline: the same ``{"train": [...], "val": [...]}`` ops as ``FFCVDataModule``.
        no_aug_from_epoch: accepted so recipes that set it compose; a value is a one-line error (FFCV only).
        prepare_command: the command that makes ``root``, named when it is missing.
        decode: ``cpu``: PIL decodes and crops in the loader workers; ``device``: workers read the JPEG bytes and
            draw the same crops and flips, and each batch is decoded and cropped on the training device
            (`lightning_lars.data.device_decode`; on a CPU device, on the CPU with the same code).
    """

    def __init__(
        self,
        root: str,
        num_classes: int,
        batch_size: int = 256,
        seed: int = 0,
        num_workers: int | None = None,
        resolution: int | Mapping = 224,
        val_resolution: int = 224,
        pipeline: Mapping[str, list] | None = None,
        pin_memory: bool = True,
        no_aug_from_epoch: int | None = None,
        prepare_command: str | None = None,
        decode: str = "cpu",
    ):
        super().__init__()
        if decode not in DECODE_CHOICES:
            raise UserError(f"data.decode must be one of {', '.join(DECODE_CHOICES)}, got {decode!r}")
        schedule = resolution_schedule(resolution)
        if schedule.is_progressive:
            raise UserError(
                "progressive resizing needs the FFCV loader: use data=imagenet, or a fixed resolution"
            )
        # Fujitsu's last epochs: the FFCV loader builds each epoch's pipeline
        if no_aug_from_epoch is not None:
            raise UserError(no_aug_message(no_aug_from_epoch))
        pipeline = dict(pipelines.DEFAULT_PIPELINE if pipeline is None else pipeline)
        if set(pipeline) != {"train", "val"}:
            raise UserError(f"data.pipeline needs exactly the keys train and val, got {sorted(pipeline)}")
        self.train_ops = pipelines.parse_pipeline("train", list(pipeline["train"]))
        self.val_ops = pipelines.parse_pipeline("val", list(pipeline["val"]))
        self.root, self.num_classes, self.batch_size, self.seed = (
            Path(root),
            int(num_classes),
            int(batch_size),
            seed,
        )
        self.num_workers, self.pin_memory, self.prepare_command = num_workers, pin_memory, prepare_command
        self.resolution, self.val_resolution = schedule.start, int(val_resolution)
        self._datasets: dict[str, datasets.ImageFolder] = {}
        self.decode = decode
        self._device_ops = {
            "train": DeviceImageOps(self.train_ops, self.resolution),
            "val": DeviceImageOps(self.val_ops, self.val_resolution),
        }
        self._said_where_it_decodes = False

    def _dataset(self, split: str) -> datasets.ImageFolder:
        if split not in self._datasets:
            folder = self.root / split
            if not folder.is_dir():
                raise UserError(missing_folder_message(folder, self.prepare_command))
            ops, res = (
                (self.train_ops, self.resolution) if split == "train" else (self.val_ops, self.val_resolution)
            )
            transform = torchvision_transform(ops, res) if self.decode == "cpu" else None
            try:
                dataset = datasets.ImageFolder(str(folder), transform=transform, loader=load_rgb)
            except FileNotFoundError as err:  # a class folder without an image: torchvision's own one line
                raise UserError(f"{folder}: {err}; add images there or remove the folder") from None
            if len(dataset.classes) != self.num_classes:
                raise UserError(classes_message(folder, len(dataset.classes), self.num_classes))
            self._datasets[split] = dataset
        return self._datasets[split]

    @property
    def num_train_images(self) -> int:
        return len(self._dataset("train"))

    @property
    def num_val_images(self) -> int:
        return len(self._dataset("val"))

    def _workers(self) -> int:
        if self.num_workers is not None:
            return int(self.num_workers)
        return default_num_workers(self.trainer)

    def _loader_options(self, split: str) -> dict:
        workers = self._workers()
        collate = {} if self.decode == "cpu" else {"collate_fn": partial(collate_encoded, split=split)}
        return {
            **collate,
            "batch_size": self.batch_size,
            "num_workers": workers,
            "persistent_workers": workers > 0,
            "pin_memory": self.pin_memory and torch.cuda.is_available(),
        }

    def train_dataloader(self) -> DataLoader:
        """Resumable mid-epoch, exactly (`lightning_lars.data.resumable_loader`): the epoch's order and each
        sample's crop and flip follow from (seed, epoch, sample index); whole optimizer steps only."""
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        accumulation = trainer.accumulate_grad_batches if trainer is not None else 1
        dataset = self._dataset("train")
        sampler = EpochSampler(
            len(dataset),
            seed=self.seed,
            rank=rank,
            world_size=world,
            step_images=self.batch_size * world * accumulation,
        )
        return ResumableDataLoader(
            SeededSamples(self._samples("train"), self.seed),
            sampler=sampler,
            drop_last=True,
            **self._loader_options("train"),
        )

    def val_dataloader(self) -> DataLoader:
        # class by class on disk: a fixed permutation makes any prefix sample every class
        dataset = Subset(self._samples("val"), val_order(len(self._dataset("val"))).tolist())
        return DataLoader(dataset, shuffle=False, **self._loader_options("val"))

    def _samples(self, split: str) -> Dataset:
        """The split's dataset: decoded images (decode=cpu), or bytes with their crop and flip (decode=device)."""
        dataset = self._dataset(split)
        if self.decode == "cpu":
            return dataset
        return EncodedSamples(dataset.samples, self.train_ops if split == "train" else self.val_ops)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """decode=device: the batch is decoded, cropped and normalised on ``device`` (`DeviceImageOps`)."""
        if not (isinstance(batch, (tuple, list)) and isinstance(batch[0], EncodedImages)):
            return super().transfer_batch_to_device(batch, device, dataloader_idx)
        images, labels = batch
        if device.type != "cuda" and not self._said_where_it_decodes:
            rank_zero_info(
                f"[lightning-lars] data.decode=device on a {device.type} device: batches decode on the CPU"
            )
            self._said_where_it_decodes = True
        return self._device_ops[images.split](images, device), labels.to(device, non_blocking=True)
