"""One rank's share of an epoch, and the resumable iterable that feeds it through FFCV.

Every rank computes the same global order from (seed, epoch) (``epoch_order``), keeps whole optimizer steps and
takes every ``world_size``-th sample from ``rank`` on (``shard``: ``DistributedSampler``'s layout, no padding).
``FFCVEpochLoader`` runs that order through FFCV's ``EpochIterator`` and counts the global samples handed out
(``EpochProgress``), so a resumed epoch starts after them. ``ffcv_datamodule`` builds these per split.

Imports numpy, torch and FFCV only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from ffcv.loader import Loader
from ffcv.loader.epoch_iterator import EpochIterator
from ffcv.pipeline.compiler import Compiler


def epoch_order(num_samples: int, *, seed: int, epoch: int, order: str) -> np.ndarray:
    """The global sample order of one epoch, identical on every rank (``random``/``sequential`` only)."""
    if order == "sequential":
        return np.arange(num_samples, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(num_samples).astype(np.int64)


def shard(
    global_order: np.ndarray,
    *,
    rank: int,
    world_size: int,
    batch_size: int,
    drop_last: bool,
    samples_consumed: int = 0,
    accumulate_grad_batches: int = 1,
) -> np.ndarray:
    """This rank's samples after ``samples_consumed`` global samples (a multiple of ``world_size``).

    ``drop_last``: keep whole optimizer steps (``batch_size * world_size * accumulate_grad_batches`` images)
    of the full epoch, so no step sees a partial batch. Otherwise every sample once; shards then differ by at
    most one sample (no padding, so nothing is counted twice)."""
    if drop_last:
        step_images = batch_size * world_size * accumulate_grad_batches
        global_order = global_order[: len(global_order) // step_images * step_images]
    return global_order[samples_consumed:][rank::world_size]


class _EpochIterator(EpochIterator):
    """FFCV's epoch thread, made to end the epoch and keep the error when it fails: FFCV's own thread just
    dies and leaves the consumer waiting on its queue forever."""

    error: BaseException | None = None

    def run(self):
        try:
            super().run()
        except BaseException as error:  # noqa: BLE001 - re-raised in the consuming thread
            self.error = error
            self.output_queue.put(None)


@dataclass
class EpochProgress:
    """Where training stands in the data: the epoch and the global samples (all ranks) handed out in it."""

    epoch: int = 0
    samples_consumed: int = 0

    def set_epoch(self, epoch: int) -> None:
        """Lightning calls this (as ``loader.sampler.set_epoch``) before each epoch; a new epoch starts at 0."""
        if epoch != self.epoch:
            self.epoch, self.samples_consumed = epoch, 0


class FFCVEpochLoader:
    """Iterable over one rank's batches; ``len`` is the full epoch's batch count, a resumed epoch yields the rest.

    ``loader_for_epoch(epoch)`` gives the FFCV Loader (pipeline and resolution) and ``order_for_epoch(loader,
    epoch)`` the global order. Iteration is lazy, so Lightning's ``iter()`` probe at set-up starts nothing.
    """

    batch_sampler = None  # Lightning looks for it next to ``sampler``

    def __init__(
        self,
        loader_for_epoch: Callable[[int], Loader],
        order_for_epoch: Callable[[Loader, int], np.ndarray],
        num_samples: int,
        *,
        rank: int,
        world_size: int,
        batch_size: int,
        drop_last: bool,
        progress: EpochProgress | None = None,
        resumable: bool = True,
        accumulate_grad_batches: int = 1,
    ):
        self.loader_for_epoch, self.order_for_epoch = loader_for_epoch, order_for_epoch
        self.num_samples, self.rank, self.world_size = num_samples, rank, world_size
        self.batch_size, self.drop_last, self.accumulate = batch_size, drop_last, accumulate_grad_batches
        self.progress = progress if progress is not None else EpochProgress()
        self.resumable = resumable  # False (val): every pass starts at the first sample
        self.sampler = self.progress  # Lightning's _set_sampler_epoch calls sampler.set_epoch(epoch)

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // (self.batch_size * self.world_size * self.accumulate) * self.accumulate
        per_rank = len(range(self.rank, self.num_samples, self.world_size))
        return (per_rank + self.batch_size - 1) // self.batch_size

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = self.progress.epoch
        start = self.progress.samples_consumed if self.resumable else 0
        loader = self.loader_for_epoch(epoch)
        indices = shard(
            self.order_for_epoch(loader, epoch),
            rank=self.rank,
            world_size=self.world_size,
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            samples_consumed=start,
            accumulate_grad_batches=self.accumulate,
        )
        Compiler.set_num_threads(loader.num_workers)
        # FFCV's own orders are contiguous uint64: the same type keeps numba from compiling the pipeline again
        epoch_iterator = _EpochIterator(loader, np.ascontiguousarray(indices, dtype=np.uint64))
        try:
            for batch in epoch_iterator:
                # count before yielding: a checkpoint taken while this batch trains must include it
                self.progress.samples_consumed += len(batch[0]) * self.world_size
                yield batch
            if epoch_iterator.error is not None:
                raise RuntimeError(f"FFCV's loader thread failed on {loader.fname}") from epoch_iterator.error
            self.progress.epoch, self.progress.samples_consumed = epoch + 1, 0
        finally:
            epoch_iterator.close()

    def state_dict(self) -> dict[str, int]:
        """Lightning stores this with the fit loop; resuming from it repeats no sample and skips none."""
        return {"epoch": self.progress.epoch, "samples_consumed": self.progress.samples_consumed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.progress.epoch, self.progress.samples_consumed = (
            int(state["epoch"]),
            int(state["samples_consumed"]),
        )
