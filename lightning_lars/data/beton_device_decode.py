"""``data.decode=device`` for .beton files: FFCV's threads read each image's stored bytes and draw its crop box and
flip; the batch is decoded, cropped, flipped and normalised where it trains (`device_decode.DeviceImageOps`).

FFCV's image decoders all decode on the CPU and none hands out the stored bytes, so this module adds the smallest
decoder that does, shaped like FFCV's own ``BytesDecoder`` (a subclass of the field's decoder class,
``SimpleRGBImageDecoder``: FFCV takes a pipeline's first op as its decoder only then): one fixed-size uint8 row per
sample, ``HEADER_BYTES`` of little-endian int32 fields (``HEADER_FIELDS``) and then the sample's stored bytes,
a JPEG file (``write_mode`` jpg) or raw HWC pixels (raw). ``rows_to_encoded`` turns a batch of rows back into
`device_decode.EncodedImages` without copying the bytes.

Same samples as FFCV's CPU path (`seeded_ops`), by construction: the box is drawn by the same jitted code, FFCV's
``get_random_crop`` (or ``get_center_crop``) after reseeding numba's generator with ``sample_seed(crop key,
sample index)``, and the flip is ``np.random.random() < prob`` after ``sample_seed(flip key, sample index)``,
as ``SeededRandomHorizontalFlip`` draws it. The pixels differ by the resize only: FFCV's CPU path resizes with
OpenCV's INTER_AREA, this one with torchvision's antialiased bilinear (tests/unit/test_beton_device_decode.py
measures the gap), and on CUDA by the decoder (nvJPEG instead of libjpeg-turbo).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import torch
from ffcv.fields.rgb_image import IMAGE_MODES, SimpleRGBImageDecoder, get_center_crop, get_random_crop
from ffcv.pipeline.allocation_query import AllocationQuery
from ffcv.pipeline.compiler import Compiler
from ffcv.pipeline.state import State

from lightning_lars.data import pipelines
from lightning_lars.data.device_decode import EncodedImages
from lightning_lars.data.seeded_ops import (
    CROP_SALT,
    FLIP_SALT,
    _EpochSeeded,
    _load_uint64,
    epoch_key,
    sample_seed,
)

HEADER_FIELDS = ("num_bytes", "mode", "height", "width", "top", "left", "box_height", "box_width", "flip")
HEADER_BYTES = 64  # 16 int32 slots, 9 used: the stored bytes start 64-byte aligned
NUM_BYTES, MODE, HEIGHT, WIDTH, TOP, LEFT, BOX_HEIGHT, BOX_WIDTH, FLIP = range(len(HEADER_FIELDS))
RAW_MODE = IMAGE_MODES["raw"]


def max_stored_bytes(path: str, field: str = "image") -> int:
    """The largest stored size (bytes) of ``field`` in the .beton at ``path``, from its allocation table."""
    from ffcv.reader import Reader  # reads the header, metadata and allocation table only

    reader = Reader(str(path))
    pointers = reader.metadata[f"f{reader.field_names.index(field)}"]["data_ptr"]  # FFCV names them f0, f1...
    table = reader.alloc_table
    sizes = table["size"][np.isin(table["ptr"], pointers)]
    return int(sizes.max()) if sizes.size else 0


class EncodedRGBImageDecoder(_EpochSeeded, SimpleRGBImageDecoder):
    """RGBImageField -> per-sample rows: header (box, flip, mode, size) then the stored bytes; nothing decoded.

    Args:
        max_bytes: the largest stored image in the file (`max_stored_bytes`); sizes the rows.
        crop: "random_resized_crop" or "center_crop", the CPU path's decoder whose box is drawn.
        scale, ratio: the random crop's ranges (the parsed op's); for a centre crop ``ratio`` is crop side /
            short side and ``scale`` is None.
        flip_prob: probability of a horizontal flip; 0 without a flip op.
        seed: non-negative; the run's seed (the crop and flip keys are ``seeded_ops``').
    """

    salt = CROP_SALT  # the seeded CPU decoder's stream: the same boxes

    def __init__(
        self,
        max_bytes: int,
        *,
        crop: str,
        ratio: Sequence[float] | float,
        scale: Sequence[float] | None = None,
        flip_prob: float = 0.0,
        seed: int,
    ):
        super().__init__()
        if crop not in pipelines.DECODERS:
            raise ValueError(f"crop must be one of {sorted(pipelines.DECODERS)}, got {crop!r}")
        self.max_bytes, self.crop, self.flip_prob = int(max_bytes), crop, float(flip_prob)
        self.scale, self.ratio = scale, ratio
        self.output_size = None  # the device side resizes: FFCV's per-epoch resolution does not apply here
        self._flip_key = np.zeros(1, dtype=np.uint64)  # before _init_seed, whose set_epoch writes it
        self._init_seed(seed)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self._flip_key[0] = epoch_key(self.seed, self.epoch, FLIP_SALT)

    def declare_state_and_memory(self, previous_state: State) -> tuple[State, AllocationQuery]:
        shape = (HEADER_BYTES + self.max_bytes,)
        return replace(previous_state, jit_mode=True, shape=shape, dtype=np.dtype("<u1")), AllocationQuery(
            shape, np.dtype("<u1")
        )

    def generate_code(self) -> Callable:
        mem_read = self.memory_read
        my_range = Compiler.get_iterator()
        random_crop = self.crop == "random_resized_crop"
        get_crop_c = Compiler.compile(get_random_crop if random_crop else get_center_crop)
        scale = np.array(self.scale if random_crop else (0.0, 0.0), dtype=np.float64)
        ratio = np.array(self.ratio, dtype=np.float64) if random_crop else float(self.ratio)
        crop_key_address, flip_key_address = self._key_address, self._flip_key.ctypes.data
        flip_prob, header_bytes, num_fields = self.flip_prob, HEADER_BYTES, len(HEADER_FIELDS)

        def encode(batch_indices, destination, metadata, storage_state):
            crop_key, flip_key = _load_uint64(crop_key_address), _load_uint64(flip_key_address)
            for dst_ix in my_range(len(batch_indices)):
                source_ix = batch_indices[dst_ix]
                field = metadata[source_ix]
                data = mem_read(field["data_ptr"], storage_state)
                height, width = np.uint32(field["height"]), np.uint32(field["width"])
                np.random.seed(sample_seed(crop_key, source_ix))  # as the seeded CPU decoder
                i, j, h, w = get_crop_c(height, width, scale, ratio)
                np.random.seed(sample_seed(flip_key, source_ix))  # as SeededRandomHorizontalFlip
                flip = 1 if flip_prob > 0 and np.random.random() < flip_prob else 0
                row = destination[dst_ix]
                row[header_bytes : header_bytes + data.size] = data
                fields = np.empty(num_fields, dtype=np.int64)
                fields[NUM_BYTES], fields[MODE], fields[HEIGHT], fields[WIDTH] = (
                    data.size,
                    field["mode"],
                    height,
                    width,
                )
                fields[TOP], fields[LEFT], fields[BOX_HEIGHT], fields[BOX_WIDTH], fields[FLIP] = (
                    i,
                    j,
                    h,
                    w,
                    flip,
                )
                # little-endian int32, byte by byte (no view of the row needed)
                for slot in range(num_fields):
                    for k in range(4):
                        row[4 * slot + k] = (fields[slot] >> (8 * k)) & 255
            return destination[: len(batch_indices)]

        encode.is_parallel = True
        return encode


def encoded_image_ops(ops: Sequence[pipelines.Op], max_bytes: int, seed: int) -> list:
    """A split's validated ops -> the FFCV image pipeline of ``data.decode=device``: the row decoder and
    ``ToTensor`` (rows stay on the host; the DataModule decodes them on the device)."""
    from ffcv.transforms import ToTensor  # FFCV imports numba (seconds): only when a pipeline is built

    crop = next(op for op in ops if op.name in pipelines.DECODERS)
    flip = next((op for op in ops if op.name == "flip"), None)
    if crop.name == "random_resized_crop":
        args = {
            "scale": tuple(float(x) for x in crop.args["scale"]),
            "ratio": tuple(float(x) for x in crop.args["ratio"]),
        }
    else:
        args = {"ratio": float(crop.args["ratio"])}
    flip_prob = 0.0 if flip is None else float(flip.args["prob"])
    decoder = EncodedRGBImageDecoder(max_bytes, crop=crop.name, flip_prob=flip_prob, seed=seed, **args)
    return [decoder, ToTensor()]


def rows_to_encoded(rows: torch.Tensor, split: str) -> EncodedImages:
    """A batch of rows (N, HEADER_BYTES + max_bytes) uint8 on the host -> `EncodedImages`: JPEG bytes as 1-D
    views of the row (the batch's decode reads them before the next batch is taken), raw images as CHW copies.

    Raw images are copied out of FFCV's buffer, one block a batch from torch's pinned-memory pool where CUDA is:
    FFCV's thread rewrites its (pinned) buffer once the next batch is taken, while the copy to the GPU, queued
    behind the steps the host has run ahead, may not have run yet; torch's pool keeps its own block until then."""
    header = rows[:, :HEADER_BYTES].contiguous().view(torch.int32).tolist()  # little-endian, as written
    data = [
        row[HEADER_BYTES : HEADER_BYTES + fields[NUM_BYTES]] for row, fields in zip(rows, header, strict=True)
    ]
    raw = [i for i, fields in enumerate(header) if fields[MODE] == RAW_MODE]
    if raw:
        sizes = [data[i].numel() for i in raw]
        block = torch.empty(sum(sizes), dtype=torch.uint8, pin_memory=torch.cuda.is_available())
        for i, part in zip(raw, block.split(sizes), strict=True):
            height, width = header[i][HEIGHT], header[i][WIDTH]
            data[i] = part.copy_(data[i]).view(height, width, 3).permute(2, 0, 1)
    boxes = torch.tensor([fields[TOP : BOX_WIDTH + 1] for fields in header], dtype=torch.int64)
    flips = torch.tensor([bool(fields[FLIP]) for fields in header])
    return EncodedImages(data, boxes.view(-1, 4), flips, split)
