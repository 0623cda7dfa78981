"""FFCV train/val loaders as a Lightning DataModule: exact DDP shards, per-epoch seeding, mid-epoch resume.

Order and sharding are ours, not FFCV's ``distributed=True``: that mode wraps torch's ``DistributedSampler``
with ``drop_last=False``, which pads ranks with repeated samples, so some images are seen twice per epoch.
Instead every rank computes the same global order from (seed, epoch), keeps whole global batches
(``batch_size * world_size`` images; the remainder is dropped so every optimizer step sees exactly the global
batch), and takes every ``world_size``-th sample from ``rank`` on (``DistributedSampler``'s layout, no padding).
Global batch ``j`` is then the same set of images whatever the world size, which makes resume exact: the
DataModule counts the global samples handed out this epoch and a resumed epoch starts after them.
``epoch_loader`` holds that order, the shard and the loader that runs it through FFCV's ``EpochIterator``.
Random crop and flip draw from (seed, epoch, sample index) (``seeded_ops``), so a resumed epoch also repeats
the unbroken run's augmentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L
import numpy as np
import torch
from ffcv.loader import Loader, OrderOption
from lightning.pytorch.utilities import rank_zero_info

from lightning_lars.core.errors import UserError
from lightning_lars.data import ffcv_ops, pipelines, seeded_ops
from lightning_lars.data.beton_device_decode import encoded_image_ops, max_stored_bytes, rows_to_encoded
from lightning_lars.data.beton_header import read_num_samples
from lightning_lars.data.device_decode import DECODE_CHOICES, DeviceImageOps
from lightning_lars.data.epoch_loader import EpochProgress, FFCVEpochLoader, epoch_order
from lightning_lars.data.holdout import holdout_split
from lightning_lars.data.resolution import ResolutionSchedule, resolution_schedule
from lightning_lars.data.val_order import val_order
from lightning_lars.data.workers import default_num_workers

ORDERS = ("random", "quasi_random", "sequential")


class FFCVDataModule(L.LightningDataModule):
    """FFCV ``train.beton``/``val.beton`` loaders for one device of a (multi-node) DDP run.

    Args:
        train_path, val_path: .beton files with fields ``image`` (RGBImageField) and ``label`` (IntField).
        num_classes: classes in the labels.
        batch_size: images per device per step (`lightning_lars.training.run.build` passes the per-device batch).
        seed: order and augmentation seed; epoch ``e`` is shuffled by (seed, e), the same on every rank, and a
            sample's random crop and flip come from (seed, e, sample index) (``seeded_ops``).
        num_workers: FFCV threads per process; None = this process's CPU share (`workers.default_num_workers`).
        resolution: train px, or a progressive-resize mapping (start, end, start_ramp_epoch, end_ramp_epoch).
        val_resolution: eval px (may exceed the train resolution: FixRes' train-test gap).
        order: "random", "quasi_random" (page-local shuffling for data larger than RAM; one process only:
            FFCV cannot shard it, libffcv/ffcv#130) or "sequential".
        os_cache: let the page cache hold the file (True, shared by all ranks) or FFCV's process cache (False).
        pipeline: ``{"train": [...ops], "val": [...ops]}``; see ``lightning_lars.data.pipelines``.
        no_aug_from_epoch: from this 0-based epoch, train without random crop and flip (Fujitsu's last epochs).
        batches_ahead: batches FFCV prepares in advance.
        prepare_command: the command named in errors when a file is missing or damaged.
        holdout: a share of train.beton held out (``holdout.holdout_split`` with ``holdout_seed``): never trained
            on, and evaluated instead of val.beton, for tuning without the validation images; 0: none.
        decode: ``cpu``: FFCV's threads decode, crop and flip; ``device``: they hand over each image's stored
            bytes with the same crop box and flip, and each batch is decoded and cropped on the training device
            (`lightning_lars.data.beton_device_decode`; on a CPU device, on the CPU with the same code).
    """

    def __init__(
        self,
        train_path: str,
        val_path: str,
        num_classes: int,
        batch_size: int = 256,
        seed: int = 0,
        num_workers: int | None = None,
        resolution: int | Mapping | ResolutionSchedule = 224,
        val_resolution: int = 224,
        order: str = "random",
        os_cache: bool = True,
        pipeline: Mapping[str, list] | None = None,
        no_aug_from_epoch: int | None = None,
        batches_ahead: int = 3,
        prepare_command: str = "make prepare src=<imagefolder> out=<dir>",
        holdout: float = 0.0,
        holdout_seed: int = 0,
        decode: str = "cpu",
    ):
        super().__init__()
        if decode not in DECODE_CHOICES:
            raise UserError(f"data.decode must be one of {', '.join(DECODE_CHOICES)}, got {decode!r}")
        if order not in ORDERS:
            raise UserError(f"data.order must be one of {ORDERS}, got {order!r}")
        if batch_size <= 0:
            raise UserError(f"batch size per device must be positive, got {batch_size}")
        pipeline = dict(pipelines.DEFAULT_PIPELINE if pipeline is None else pipeline)
        if set(pipeline) != {"train", "val"}:
            raise UserError(f"data.pipeline needs exactly the keys train and val, got {sorted(pipeline)}")
        self.train_ops = pipelines.parse_pipeline("train", list(pipeline["train"]))
        self.val_ops = pipelines.parse_pipeline("val", list(pipeline["val"]))
        self.train_path, self.val_path, self.num_classes = str(train_path), str(val_path), int(num_classes)
        self.batch_size, self.seed, self.num_workers = int(batch_size), int(seed), num_workers
        self.resolution, self.val_resolution = resolution_schedule(resolution), int(val_resolution)
        self.order, self.os_cache, self.batches_ahead = order, bool(os_cache), int(batches_ahead)
        self.no_aug_from_epoch, self.prepare_command = no_aug_from_epoch, prepare_command
        self.holdout, self.holdout_seed = float(holdout), int(holdout_seed)
        self._split: tuple[np.ndarray, np.ndarray] | None = None
        self.progress = EpochProgress()
        self.rank, self.world_size, self.device = 0, 1, torch.device("cpu")
        self.accumulate_grad_batches = 1  # from the trainer: an epoch keeps whole optimizer steps
        self._loaders: dict[str, Loader] = {}
        self.decode, self._said_where_it_decodes = decode, False
        self._post_transfer = {
            "train": pipelines.post_transfer_normalize(self.train_ops),
            "val": pipelines.post_transfer_normalize(self.val_ops),
        }
        self._device_ops = {  # decode=device: the batch's own boxes size nothing, so resolution is per split
            "train": DeviceImageOps(self.train_ops, self.resolution.at_epoch(0), boxes_drawn=True),
            "val": DeviceImageOps(self.val_ops, self.val_resolution, boxes_drawn=True),
        }

    def split(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(trained, evaluated) indices of train.beton under ``holdout``; None without one."""
        if self.holdout and self._split is None:
            total = read_num_samples(self.train_path, self.prepare_command)
            self._split = holdout_split(total, self.holdout, self.holdout_seed)
        return self._split

    @property
    def num_train_images(self) -> int:
        """Images trained on (header read only; the schedule needs steps per epoch before training)."""
        split = self.split()
        return len(split[0]) if split else read_num_samples(self.train_path, self.prepare_command)

    @property
    def num_val_images(self) -> int:
        split = self.split()
        return len(split[1]) if split else read_num_samples(self.val_path, self.prepare_command)

    def steps_per_epoch(self, world_size: int, accumulate_grad_batches: int = 1) -> int:
        """Optimizer steps per epoch: the train loader keeps whole steps and drops the rest."""
        return self.num_train_images // (self.batch_size * world_size * accumulate_grad_batches)

    def setup(self, stage: str | None = None) -> None:
        """Take rank, world size and device from the trainer (Lightning injects no sampler into FFCV)."""
        trainer = self.trainer
        if trainer is not None:
            self.rank, self.world_size = trainer.global_rank, trainer.world_size
            self.accumulate_grad_batches = int(trainer.accumulate_grad_batches)
            root_device = trainer.strategy.root_device
            self.device = root_device if root_device.type == "cuda" else torch.device("cpu")
        if self.order == "quasi_random" and self.world_size > 1:
            raise UserError(
                "data.order=quasi_random works in one process only (FFCV cannot shard it, libffcv/ffcv#130);"
                f" this run has {self.world_size}: use data.order=random"
            )
        read_num_samples(self.train_path if stage in (None, "fit") else self.val_path, self.prepare_command)

    def _workers(self) -> int:
        if self.num_workers is not None:
            return int(self.num_workers)
        return default_num_workers(self.trainer)

    def _build_loader(self, path: str, ops: tuple, resolution: int, order: str) -> Loader:
        read_num_samples(path, self.prepare_command)
        if self.decode == "device":
            image_ops = encoded_image_ops(ops, max_stored_bytes(path), self.seed)
        else:
            image_ops = ffcv_ops.build_image_ops(ops, resolution, self.device, seed=self.seed)
        try:
            return Loader(
                path,
                batch_size=self.batch_size,
                num_workers=self._workers(),
                os_cache=self.os_cache,
                order=OrderOption.QUASI_RANDOM if order == "quasi_random" else OrderOption.SEQUENTIAL,
                distributed=False,
                seed=self.seed,
                drop_last=False,
                batches_ahead=self.batches_ahead,
                pipelines={"image": image_ops, "label": ffcv_ops.build_label_ops(self.device)},
            )
        except (AssertionError, ValueError, IndexError, KeyError, OSError) as error:
            raise UserError(
                f"dataset file {path} cannot be read by FFCV ({type(error).__name__}: {error}):"
                f" prepare it again with {self.prepare_command}"
            ) from None

    def _train_loader_for_epoch(self, epoch: int) -> Loader:
        """The train Loader for ``epoch``: augmented or not, its decoder set to the epoch's resolution."""
        plain = self.no_aug_from_epoch is not None and epoch >= self.no_aug_from_epoch
        key = "train_no_aug" if plain else "train"
        resolution = self.resolution.at_epoch(epoch)
        if key not in self._loaders:
            ops = pipelines.without_augmentation(self.train_ops, self.val_ops) if plain else self.train_ops
            self._loaders[key] = self._build_loader(self.train_path, ops, resolution, self.order)
        loader = self._loaders[key]
        image_spec = loader.pipeline_specs["image"]
        seeded_ops.set_epoch([image_spec.decoder, *image_spec.transforms], epoch)  # no FFCV thread runs yet
        decoder = image_spec.decoder
        if self.decode == "device":
            self._device_ops["train"].resolution = resolution  # the rows carry no size: the device resizes
        elif decoder.output_size != (resolution, resolution):
            decoder.output_size = (resolution, resolution)  # buffers follow: FFCV sizes them per epoch
            loader.generate_code()
        return loader

    def _train_order(self, loader: Loader, epoch: int) -> np.ndarray:
        if self.order == "quasi_random":
            return np.asarray(loader.traversal_order.sample_order(epoch), dtype=np.int64)
        split = self.split()
        if split:  # the same shuffle over the kept images' positions, then their indices in the file
            return split[0][epoch_order(len(split[0]), seed=self.seed, epoch=epoch, order=self.order)]
        return epoch_order(loader.reader.num_samples, seed=self.seed, epoch=epoch, order=self.order)

    def train_dataloader(self) -> FFCVEpochLoader:
        return FFCVEpochLoader(
            self._train_loader_for_epoch,
            self._train_order,
            self.num_train_images,
            rank=self.rank,
            world_size=self.world_size,
            batch_size=self.batch_size,
            drop_last=True,
            progress=self.progress,
            accumulate_grad_batches=self.accumulate_grad_batches,
        )

    def val_dataloader(self) -> FFCVEpochLoader:
        def val_loader(epoch: int) -> Loader:
            if "val" not in self._loaders:
                # held-out train images, unaugmented
                path = self.train_path if self.holdout else self.val_path
                self._loaders["val"] = self._build_loader(
                    path, self.val_ops, self.val_resolution, "sequential"
                )
            return self._loaders["val"]

        def order(loader: Loader, epoch: int) -> np.ndarray:
            split = self.split()
            if split:
                return split[1][val_order(len(split[1]))]
            return val_order(loader.reader.num_samples)  # a prefix samples every class (data/val_order.py)

        return FFCVEpochLoader(
            val_loader,
            order,
            self.num_val_images,
            rank=self.rank,
            world_size=self.world_size,
            batch_size=self.batch_size,
            drop_last=False,
            resumable=False,
        )

    def _split_now(self) -> str:
        return "train" if self.trainer is None or self.trainer.training else "val"

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """decode=device: the rows of stored bytes are decoded, cropped and normalised on ``device``."""
        if self.decode != "device":
            return super().transfer_batch_to_device(batch, device, dataloader_idx)
        if device.type != "cuda" and not self._said_where_it_decodes:
            rank_zero_info(
                f"[lightning-lars] data.decode=device on a {device.type} device: batches decode on the CPU"
            )
            self._said_where_it_decodes = True
        return self.decode_batch(batch, device, self._split_now())

    def decode_batch(self, batch: Any, device: torch.device, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """decode=device: one FFCV batch ``(rows, labels)`` of ``split`` -> (normalised images, labels) on
        ``device``. Call it before the next batch: the rows are FFCV's reused buffer."""
        rows, labels = batch
        images = self._device_ops[split](rows_to_encoded(rows, split), device)
        return images, labels.to(device, non_blocking=True)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """GPU variant: normalise uint8 images on their device, on the main stream (see pipelines)."""
        normalize = None if self.decode == "device" else self._post_transfer[self._split_now()]
        if normalize is None:
            return batch
        images, labels = batch
        return normalize(images), labels

    def state_dict(self) -> dict[str, int]:
        """Epoch and global samples consumed in it: a resumed epoch yields exactly the samples not yet seen."""
        return {"epoch": self.progress.epoch, "samples_consumed": self.progress.samples_consumed}

    def load_state_dict(self, state_dict: Mapping[str, int]) -> None:
        self.progress.epoch = int(state_dict["epoch"])
        self.progress.samples_consumed = int(state_dict["samples_consumed"])
