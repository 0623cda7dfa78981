"""Seeded FFCV random crop and flip: a sample's random draws depend only on (seed, epoch, sample index).

FFCV's own ``RandomResizedCropRGBImageDecoder`` and ``RandomHorizontalFlip`` draw from numba's per-thread RNG,
which every process seeds from OS entropy: two runs with the same seed differ, so a resumed run cannot match an
unbroken one. These ops reseed that per-thread RNG right before each sample's draws (as FFCV's own mixup does
with ``np.random.seed(indices[-1])``), from a 32-bit seed mixed from

- the op's epoch key: ``SeedSequence([seed, epoch, salt])``, one uint64 per op, and
- the sample's index in the .beton file (decoders get the batch's indices; the flip asks for them through
  FFCV's ``with_indices``).

So a sample's crop and flip do not depend on its position in the batch, the batch size, the number of FFCV
threads (each thread seeds its own generator just before drawing), the rank, or what ran before.

The epoch key lives in a one-element numpy array that the jitted code reads through its address: numba freezes
arrays captured by a closure into the compiled code, so a captured array would keep the epoch it was compiled
with, and recompiling the pipeline each epoch costs seconds. ``set_epoch`` writes the array; the DataModule calls
it before each epoch's first batch is decoded (no FFCV thread is running then).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numba
import numpy as np
from ffcv.fields.rgb_image import IMAGE_MODES, RandomResizedCropRGBImageDecoder, get_random_crop
from ffcv.libffcv import imdecode, resize_crop
from ffcv.pipeline.compiler import Compiler
from ffcv.transforms import RandomHorizontalFlip
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from lightning_lars.core.errors import UserError

# Salts keep the crop's and the flip's streams apart: with one stream the flip would reuse the crop's first
# uniform draw (its area), and large crops would be flipped more often.
CROP_SALT, FLIP_SALT = 1, 2

# splitmix64 constants (Steele et al. 2014): a bijective 64-bit mix, so neighbouring indices get unrelated seeds
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SHIFT_30, _SHIFT_27, _SHIFT_31, _SHIFT_32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)


@intrinsic
def _load_uint64(typingctx, address):
    """The uint64 stored at ``address`` (an integer), read at call time rather than frozen at compile time."""
    signature = types.uint64(types.intp)

    def codegen(context, builder, sig, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load_atomic(pointer, "monotonic", 8)  # plain 8-byte read; no reordering across calls

    return signature, codegen


@numba.njit(nogil=True, cache=False)
def sample_seed(epoch_key: np.uint64, index: np.uint64) -> np.uint32:
    """32-bit seed for one sample (numba's ``np.random.seed`` takes 32 bits): splitmix64 of key + index."""
    z = epoch_key + (np.uint64(index) + np.uint64(1)) * _GOLDEN
    z = (z ^ (z >> _SHIFT_30)) * _MIX_1
    z = (z ^ (z >> _SHIFT_27)) * _MIX_2
    z = z ^ (z >> _SHIFT_31)
    return np.uint32(z >> _SHIFT_32)


def epoch_key(seed: int, epoch: int, salt: int) -> np.uint64:
    """The uint64 every sample seed of one op in one epoch starts from."""
    return np.random.SeedSequence([seed, epoch, salt]).generate_state(1, dtype=np.uint64)[0]


class _EpochSeeded:
    """Holds an op's seed and its current epoch key in memory the jitted code reads (see module docstring)."""

    salt = 0

    def _init_seed(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise UserError(
                f"seed must be a non-negative integer (it seeds the data augmentation), got {seed!r}"
            )
        self.seed = int(seed)
        self.epoch = 0
        self._epoch_key = np.zeros(1, dtype=np.uint64)  # the jitted code reads it through its address
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s draws from the next batch on. Call it only while no FFCV thread decodes."""
        self.epoch = int(epoch)
        self._epoch_key[0] = epoch_key(self.seed, self.epoch, self.salt)

    @property
    def _key_address(self) -> int:
        return self._epoch_key.ctypes.data


class SeededRandomResizedCropRGBImageDecoder(_EpochSeeded, RandomResizedCropRGBImageDecoder):
    """FFCV's random resized crop with draws from (seed, epoch, sample index); the crop and resize are FFCV's.

    Args:
        output_size: (height, width) in px.
        scale: range of the crop's area as a fraction of the image's.
        ratio: range of the crop's aspect ratio (width / height), sampled log-uniformly.
        seed: non-negative; the run's seed.
    """

    salt = CROP_SALT

    def __init__(self, output_size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), *, seed: int):
        super().__init__(output_size, scale=scale, ratio=ratio)
        self._init_seed(seed)

    def generate_code(self) -> Callable:
        # FFCV's ResizedCropRGBImageDecoder.generate_code, with the per-sample reseed before the crop draws
        jpg = IMAGE_MODES["jpg"]
        mem_read = self.memory_read
        my_range = Compiler.get_iterator()
        imdecode_c = Compiler.compile(imdecode)
        resize_crop_c = Compiler.compile(resize_crop)
        get_crop_c = Compiler.compile(get_random_crop)
        scale, ratio = np.array(self.scale, dtype=np.float64), np.array(self.ratio, dtype=np.float64)
        key_address = self._key_address

        def decode(batch_indices, my_storage, metadata, storage_state):
            destination, temp_storage = my_storage
            key = _load_uint64(key_address)
            for dst_ix in my_range(len(batch_indices)):
                source_ix = batch_indices[dst_ix]
                field = metadata[source_ix]
                image_data = mem_read(field["data_ptr"], storage_state)
                height = np.uint32(field["height"])
                width = np.uint32(field["width"])
                if field["mode"] == jpg:
                    temp_buffer = temp_storage[dst_ix]
                    imdecode_c(
                        image_data, temp_buffer, height, width, height, width, 0, 0, 1, 1, False, False
                    )
                    selected_size = 3 * height * width
                    temp_buffer = temp_buffer.reshape(-1)[:selected_size]
                    temp_buffer = temp_buffer.reshape(height, width, 3)
                else:
                    temp_buffer = image_data.reshape(height, width, 3)
                np.random.seed(sample_seed(key, source_ix))  # this thread's generator, this sample only
                i, j, h, w = get_crop_c(height, width, scale, ratio)
                resize_crop_c(temp_buffer, i, i + h, j, j + w, destination[dst_ix])
            return destination[: len(batch_indices)]

        decode.is_parallel = True
        return decode


class SeededRandomHorizontalFlip(_EpochSeeded, RandomHorizontalFlip):
    """FFCV's horizontal flip (numpy HWC images) with each sample's coin from (seed, epoch, sample index).

    Args:
        flip_prob: probability of flipping a sample.
        seed: non-negative; the run's seed.
    """

    salt = FLIP_SALT

    def __init__(self, flip_prob: float = 0.5, *, seed: int):
        super().__init__(flip_prob)
        self._init_seed(seed)

    def generate_code(self) -> Callable:
        my_range = Compiler.get_iterator()
        flip_prob = float(self.flip_prob)
        key_address = self._key_address

        def flip(images, dst, indices):
            key = _load_uint64(key_address)
            for i in my_range(images.shape[0]):
                np.random.seed(sample_seed(key, indices[i]))
                if np.random.random() < flip_prob:
                    dst[i] = images[i, :, ::-1]
                else:
                    dst[i] = images[i]
            return dst

        flip.is_parallel = True
        flip.with_indices = True  # FFCV then passes the batch's sample indices as the third argument
        return flip


def set_epoch(operations: Iterable, epoch: int) -> None:
    """Point every seeded op among ``operations`` at ``epoch`` (others are left alone)."""
    for operation in operations:
        if isinstance(operation, _EpochSeeded):
            operation.set_epoch(epoch)
