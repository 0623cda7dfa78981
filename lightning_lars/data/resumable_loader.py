"""A torch ``DataLoader`` over an image folder that resumes mid-epoch exactly, as the FFCV loader does.

A plain ``DataLoader`` resumed from a mid-epoch checkpoint starts the epoch again with a fresh shuffle generator,
so the resumed run trains on another order (and repeats samples), and its workers draw the random crops and
flips from fresh streams: the run is not the one that was interrupted. Here

- the epoch's global order is a function of (seed, epoch) (numpy's ``default_rng([seed, epoch])``, the FFCV
  loader's order), cut to whole optimizer steps; each rank takes every ``world_size``-th sample
  (`EpochSampler`);
- each sample's augmentation draws from torch's generator seeded by (seed, epoch, sample index)
  (`SeededSamples`), whatever worker process loads it and whatever ran before;
- the loader counts the global samples it handed out and gives Lightning ``state_dict``/``load_state_dict``
  (its stateful-dataloader protocol, stored with the fit loop), so a resumed epoch starts after them.

Imports numpy and torch only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class EpochSampler(DistributedSampler):
    """This rank's ``(epoch, index)`` keys of an epoch, after ``samples_consumed`` global samples.

    A ``DistributedSampler`` so that Lightning keeps it under DDP (it replaces other samplers with its own, which
    pads ranks and shuffles from a generator it does not save); Lightning calls ``set_epoch`` before each epoch.
    ``__len__`` is the whole epoch's share: Lightning counts the batches a resumed epoch already did.
    """

    def __init__(self, num_samples: int, *, seed: int, rank: int, world_size: int, step_images: int):
        # DistributedSampler's own __init__ would ask torch.distributed, which may not be up yet
        self.size, self.seed, self.rank, self.num_replicas = num_samples, seed, rank, world_size
        self.step_images = step_images  # images per optimizer step, all ranks: only whole steps are kept
        self.shuffle, self.drop_last = True, True
        self.epoch, self.samples_consumed = 0, 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.samples_consumed = epoch, 0

    def _kept(self) -> int:
        return self.size // self.step_images * self.step_images

    def __len__(self) -> int:
        return self._kept() // self.num_replicas

    def __iter__(self) -> Iterator[tuple[int, int]]:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size)[: self._kept()]
        for index in order[self.samples_consumed :][self.rank :: self.num_replicas].tolist():
            yield self.epoch, index


class SeededSamples(Dataset):
    """``dataset[index]`` for a key ``(epoch, index)``, its random transforms drawn from torch's generator seeded
    by (seed, epoch, index); the caller's generator state is restored afterwards (a loader without workers runs
    in the training process, whose dropout and init draws must not move)."""

    def __init__(self, dataset: Dataset, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, index = key
        sample_seed = int(np.random.SeedSequence([self.seed, epoch, index]).generate_state(1)[0])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(sample_seed)
            return self.dataset[index]


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` with an `EpochSampler` that counts the global samples it handed out: before yielding, so
    a checkpoint taken while a batch trains includes it (Lightning fetches no batch ahead when the length is
    known)."""

    sampler: EpochSampler

    def __iter__(self) -> Iterator[Any]:
        sampler = self.sampler
        epoch = sampler.epoch
        for batch in super().__iter__():
            sampler.samples_consumed += len(batch[1]) * sampler.num_replicas
            yield batch
        sampler.epoch, sampler.samples_consumed = epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.sampler.epoch, "samples_consumed": self.sampler.samples_consumed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.sampler.epoch, self.sampler.samples_consumed = (
            int(state["epoch"]),
            int(state["samples_consumed"]),
        )
