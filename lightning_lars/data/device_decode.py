"""Decode on the training device: loader workers read JPEG bytes and draw each sample's crop and flip; the batch
is decoded, cropped, resized, flipped and normalised where it trains (``data.decode=device``).

The CPU path (``torchvision_datamodule.torchvision_transform``) decodes with PIL in the workers, about 258
images/s a core for ImageNet-sized JPEGs: a GPU that trains 7,900 images/s would need ~31 cores. Here a worker
only reads the file and its header, and ``torchvision.io.decode_jpeg(list, device="cuda")`` decodes the batch
with nvJPEG. Without CUDA the same code decodes on the CPU (libjpeg-turbo, as PIL), so the CPU tests cover it
all but the device call.

Same samples as the CPU path, by construction:

- the crop box and flip are drawn by torchvision's own ``RandomResizedCrop.get_params`` and the same
  ``torch.rand(1) < p`` as ``RandomHorizontalFlip``, in the ops' order, under the generator
  ``resumable_loader.SeededSamples`` seeds by (seed, epoch, sample index). ``get_params`` needs only the image's
  size, which PIL reads from the JPEG header without decoding;
- the geometry is the CPU path's: crop then resize for the random crop; resize the short side to
  ``round(resolution / ratio)`` then centre-crop for ``center_crop``; antialiased bilinear (PIL's filter), the
  whole batch in two matmuls (`batched_resize`: one kernel an image instead of five);
- the pixels differ only by the decoder (nvJPEG vs libjpeg-turbo) and by the resize's rounding (at most 1 of
  255 on the CPU, measured in tests/unit/test_device_decode.py).

A file that is not a baseline 3- or 1-channel JPEG (ImageNet's train set holds one PNG and 22 CMYK JPEGs) is
decoded by PIL in the worker and travels as pixels.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms
from torchvision.io import ImageReadMode, decode_jpeg

from lightning_lars.data import pipelines
from lightning_lars.data.batched_resize import resize_batch
from lightning_lars.data.checks import PIL_DECODE_ERRORS, unreadable_image

DECODE_CHOICES = ("cpu", "device")
JPEG_MODES = {"RGB", "L"}  # what nvJPEG and libjpeg decode to RGB; CMYK/YCCK go through PIL
# torchvision 0.29 deprecates all of torchvision.io's decoders (decode_jpeg and decode_image alike) for TorchCodec
# (>= 0.16), which neither this venv nor the GPU node's image holds: until one does, the warning is ours to carry
TORCHVISION_IO_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"


def decode_jpegs(jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """JPEG files' bytes (1-D uint8, on the host) -> uint8 CHW RGB images on ``device`` (nvJPEG on CUDA, one
    batched call), without torchvision's per-call deprecation warning (module comment above; called from the
    main thread, where ``catch_warnings`` is safe).

    On CUDA the call runs with a stream of ours as the current one. torchvision allocates the images on the
    current stream but nvJPEG writes them on a stream of its own, which waits for nothing: memory the training
    stream freed while its kernels still run (the host queues steps ahead) could be written under them. Our
    stream's blocks are only those of earlier decoded images, each held until the training stream is done with
    it (``record_stream``), and the training stream waits for the decode before it reads the images."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=TORCHVISION_IO_DEPRECATION, category=DeprecationWarning)
        if device.type != "cuda":
            return decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device)
        # cuda and cuda:0 alike: torchvision rebuilds its decoder whenever the device it is given changes form
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        training = torch.cuda.current_stream(device)
        if device not in _decode_streams:
            _decode_streams[device] = torch.cuda.Stream(device=device)
        decoding = _decode_streams[device]
        with torch.cuda.stream(decoding):
            images = decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device)
        training.wait_stream(decoding)
        for image in images:
            image.record_stream(training)
        return images


_decode_streams: dict[torch.device, torch.cuda.Stream] = {}  # one a device, made at its first batch


@dataclass
class EncodedImages:
    """One batch's images as the workers left them, each ``data`` entry either a JPEG file's bytes (1-D uint8)
    or PIL-decoded pixels (uint8 CHW); ``boxes``: (N, 4) int64 crop boxes ``top, left, height, width`` (px of the
    decoded image; unused by a centre crop); ``flips``: (N,) bool; ``split``: whose ops crop it.

    It has no ``.to``: Lightning's batch transfer would otherwise copy the bytes to the GPU, where nvJPEG does not
    read them. The DataModule's ``transfer_batch_to_device`` decodes it instead (`DeviceImageOps`).

    Pickled (a loader worker hands the batch over), ``data`` travels as one buffer and comes back as views of it:
    torch shares each tensor through a file descriptor of its own, and 408 images a batch times the batches in
    flight passed a limit of 1,024 open files ("received 0 items of ancdata")."""

    data: list[torch.Tensor]
    boxes: torch.Tensor
    flips: torch.Tensor
    split: str
    sources: list[str] = field(default_factory=list)  # each image's file, for an error that names it

    def __len__(self) -> int:
        return len(self.data)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        data = state.pop("data")
        state["shapes"] = [tuple(item.shape) for item in data]
        state["buffer"] = (
            torch.cat([item.reshape(-1) for item in data]) if data else torch.empty(0, dtype=torch.uint8)
        )
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        shapes, buffer = state.pop("shapes"), state.pop("buffer")
        sizes = [int(np.prod(shape)) for shape in shapes]
        state["data"] = [part.view(shape) for part, shape in zip(buffer.split(sizes), shapes, strict=True)]
        self.__dict__.update(state)


def collate_encoded(samples: Sequence[tuple], split: str) -> tuple[EncodedImages, torch.Tensor]:
    """``(data, box, flip, label, path)`` samples -> ``(EncodedImages, labels)``: the bytes stay a list (sizes
    differ). Bind ``split`` with ``functools.partial`` (picklable, for worker processes)."""
    data, boxes, flips, labels, paths = zip(*samples, strict=True)
    boxes, flips = torch.tensor(boxes, dtype=torch.int64), torch.tensor(flips)
    encoded = EncodedImages(list(data), boxes, flips, split, list(paths))
    return encoded, torch.tensor(labels, dtype=torch.int64)


class EncodedSamples(Dataset):
    """``(path, label)`` samples -> ``(data, box, flip, label, path)``: the file's bytes, and the crop box and flip
    the CPU path would draw for it (module docstring). Wrap it in ``SeededSamples`` for seeded draws. A file PIL
    cannot open, or cannot decode where it decodes here, is `checks.UnreadableImage`.

    Args:
        samples: ``(path, label)`` pairs, an ``ImageFolder``'s ``samples`` (so indices match the CPU path's).
        ops: the split's validated pipeline ops.
    """

    def __init__(self, samples: Sequence[tuple[str, int]], ops: Sequence[pipelines.Op]):
        self.samples, self.ops = list(samples), tuple(ops)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, tuple[int, int, int, int], bool, int, str]:
        path, label = self.samples[index]
        with open(path, "rb") as file:
            raw = file.read()
        try:
            with Image.open(io.BytesIO(raw)) as image:  # reads the header only
                width, height = image.size
                if image.format == "JPEG" and image.mode in JPEG_MODES:
                    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
                else:
                    data = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1).contiguous()
                box, flip = draw_crop_and_flip(self.ops, image, height, width)
        except PIL_DECODE_ERRORS as err:
            raise unreadable_image(path, err) from None
        return data, box, flip, label, path


def draw_crop_and_flip(
    ops: Sequence[pipelines.Op], image, height: int, width: int
) -> tuple[tuple[int, int, int, int], bool]:
    """The crop box (top, left, height, width; px) and flip of one sample, drawn from torch's generator in the
    ops' order with the calls ``torchvision_transform``'s transforms make; ``image`` (PIL, only its size and
    mode are read) is what ``get_params`` measures."""
    box, flip = (0, 0, height, width), False
    for op in ops:
        if op.name == "random_resized_crop":
            scale = [float(x) for x in op.args["scale"]]
            ratio = [float(x) for x in op.args["ratio"]]
            box = tuple(int(v) for v in transforms.RandomResizedCrop.get_params(image, scale, ratio))
        elif op.name == "flip":
            flip = bool(torch.rand(1) < float(op.args["prob"]))
    return box, flip


class DeviceImageOps:
    """``EncodedImages`` -> a float32 normalised (N, 3, resolution, resolution) batch on ``device``.

    Args:
        ops: the split's validated pipeline ops (crop, flip, normalize, layout).
        resolution: output side, px.
        boxes_drawn: every batch carries its crop boxes, centre crops' too (the .beton path draws FFCV's centre
            box); False: a centre crop is torchvision's resize-then-crop, as the JPEG-tree CPU path.
    """

    def __init__(self, ops: Sequence[pipelines.Op], resolution: int, boxes_drawn: bool = False):
        names = [op.name for op in ops]
        self.resolution = int(resolution)
        crop = next(op for op in ops if op.name in pipelines.DECODERS)
        self.crop_by_box = crop.name == "random_resized_crop" or boxes_drawn
        # as torchvision_transform: resize the short side to resolution / ratio, then centre-crop
        # (a random crop's ``ratio`` is its aspect-ratio range instead)
        crop_ratio = 1.0 if self.crop_by_box else float(crop.args["ratio"])
        self.short_side = round(self.resolution / crop_ratio)
        mean, std = pipelines.normalize_stats("", ops[names.index("normalize")].args)
        self.normalize = pipelines.TorchNormalize(mean, std)
        self.channels_last = "channels_last" in names

    def decode(
        self, data: Sequence[torch.Tensor], device: torch.device, sources: Sequence[str] = ()
    ) -> list[torch.Tensor]:
        """uint8 CHW RGB images on ``device``: JPEG bytes through one batched ``decode_jpeg`` there (nvJPEG on
        CUDA, libjpeg-turbo elsewhere), pixels copied as they are. A JPEG that does not decode (truncated: its
        header read fine in the worker) is `checks.UnreadableImage` naming its file (``sources``)."""
        decode_on = device if device.type == "cuda" else torch.device("cpu")
        jpeg_at = [i for i, item in enumerate(data) if item.dim() == 1]
        images = list(data)
        if not jpeg_at:  # decode_jpeg refuses an empty list
            return [image.to(device, non_blocking=True) for image in images]
        try:
            decoded = decode_jpegs([data[i] for i in jpeg_at], decode_on)
        except RuntimeError as err:
            raise _first_unreadable([(i, data[i]) for i in jpeg_at], sources, err) from None
        for i, image in zip(jpeg_at, decoded, strict=True):
            images[i] = image
        return [image.to(device, non_blocking=True) for image in images]

    def resized(self, images: Sequence[torch.Tensor], boxes: Sequence[Sequence[int]]) -> torch.Tensor:
        """Decoded images -> float32 (N, 3, resolution, resolution) of uint8 values, antialiased bilinear as PIL's
        resize, for the whole batch at once (`batched_resize`): the box's crop resized, or for a centre crop
        the short side resized to ``short_side`` and the centre kept (torchvision's sizes and offsets)."""
        side = self.resolution
        if self.crop_by_box:
            crops = [
                image[:, top : top + h, left : left + w] for image, (top, left, h, w) in zip(images, boxes)
            ]
            return resize_batch(crops, side)
        full, offsets = [], []
        for image in images:
            height, width = image.shape[-2:]
            short, long = sorted((height, width))
            # torchvision's resize([size]): the long side scales by the same factor, truncated
            new_long = int(self.short_side * long / short)
            new = (self.short_side, new_long) if height <= width else (new_long, self.short_side)
            full.append(new)
            offsets.append(tuple(int(round((length - side) / 2.0)) for length in new))  # as F.center_crop
        return resize_batch(list(images), side, full, offsets)

    def __call__(self, encoded: EncodedImages, device: torch.device) -> torch.Tensor:
        images = self.decode(encoded.data, device, encoded.sources)
        batch = self.resized(images, encoded.boxes.tolist())  # a host tensor: no device read-back
        flips = encoded.flips.to(device, non_blocking=True).view(-1, 1, 1, 1)
        batch = torch.where(flips, batch.flip(-1), batch)  # a mask index would read the mask back to the host
        if self.channels_last:
            batch = batch.contiguous(memory_format=torch.channels_last)
        return self.normalize(batch)


def _first_unreadable(jpegs: list[tuple[int, torch.Tensor]], sources: Sequence[str], error: RuntimeError):
    """The `checks.UnreadableImage` of the first JPEG of a batch that fails alone (libjpeg-turbo, on the host:
    run only after the batch failed); the batch's error where each decodes alone."""
    for index, jpeg in jpegs:
        try:
            decode_jpegs([jpeg], torch.device("cpu"))
        except RuntimeError as err:
            where = sources[index] if index < len(sources) else f"image {index} of its batch"
            return unreadable_image(where, str(err).strip().splitlines()[0])
    return error
