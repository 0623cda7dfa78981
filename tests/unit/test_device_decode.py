"""data.decode=device (lightning_lars/data/device_decode.py) against the CPU path (PIL in the workers) on real
JPEGs written here with PIL: the same crop boxes and flips for the same seed and sample, pixels within the
measured tolerance, and a mid-epoch resume that yields the remaining batches bit for bit. On this CPU the
device path decodes with libjpeg-turbo (torchvision.io.decode_jpeg); only the nvJPEG call is left to the GPU."""

from __future__ import annotations

import io
import sys
import warnings

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.functional as tv_functional
from helpers import run
from packaging.version import Version
from PIL import Image, ImageDraw
from torchvision.io import ImageReadMode, decode_jpeg

from lightning_lars.core.errors import UserError
from lightning_lars.data import pipelines
from lightning_lars.data.device_decode import EncodedImages, collate_encoded, decode_jpegs
from lightning_lars.data.resumable_loader import SeededSamples
from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule

# (width, height) px: landscape, portrait and square, some smaller than the 32 px output (upscaled)
SIZES = [(96, 64), (50, 80), (64, 64), (120, 45), (28, 40), (77, 91)]
CPU = torch.device("cpu")


def photo_like(width: int, height: int, rng: np.random.Generator) -> Image.Image:
    """Smooth gradients, low-frequency noise and a few solid shapes: edges and flat areas, as in photos."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height) + 64], -1)
    noise = np.kron(rng.normal(0, 25, size=(height // 4 + 1, width // 4 + 1, 3)), np.ones((4, 4, 1)))
    image = Image.fromarray(np.clip(base + noise[:height, :width], 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(3):
        x0, y0 = int(rng.integers(0, width // 2)), int(rng.integers(0, height // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        draw.ellipse((x0, y0, x0 + width // 3, y0 + height // 3), fill=colour)
    return image


def write_jpeg_tree(root, odd_files: bool = True):
    """``root/{train,val}/<class>/*.JPEG``: 2 classes x 6 images of ``SIZES``, quality 90; with ``odd_files``
    also ImageNet's odd ones: a grayscale JPEG, a CMYK JPEG and a PNG named .JPEG."""
    rng = np.random.default_rng(7)
    for split in ("train", "val"):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for index, (width, height) in enumerate(SIZES):
                image = photo_like(width, height, rng)
                if odd_files and label == "b" and index == 0:
                    image = image.convert("L")
                if odd_files and label == "b" and index == 1:
                    image = image.convert("CMYK")
                file_format = "PNG" if odd_files and label == "b" and index == 2 else "JPEG"
                image.save(folder / f"{index}.JPEG", format=file_format, quality=90)
    return root


def module(root, decode: str, **options) -> TorchvisionDataModule:
    defaults = {"batch_size": 4, "num_workers": 0, "resolution": 32, "val_resolution": 24, "seed": 3}
    return TorchvisionDataModule(
        root,
        num_classes=2,
        decode=decode,
        pipeline=pipelines.DEFAULT_PIPELINE,
        pin_memory=False,
        **{**defaults, **options},
    )


def decoded(datamodule: TorchvisionDataModule, batch) -> tuple[torch.Tensor, torch.Tensor]:
    return datamodule.transfer_batch_to_device(batch, CPU, 0)


def test_the_device_path_draws_the_cpu_paths_crop_boxes_and_flips(tmp_path, monkeypatch):
    """The oracle is the CPU path itself: torchvision's RandomResizedCrop hands its box to
    ``functional.resized_crop`` and RandomHorizontalFlip calls ``functional.hflip``; both are recorded."""
    root = write_jpeg_tree(tmp_path)
    cpu_samples = SeededSamples(module(root, "cpu")._samples("train"), seed=3)
    device_samples = SeededSamples(module(root, "device")._samples("train"), seed=3)
    keys = [(epoch, index) for epoch in (0, 1) for index in range(len(cpu_samples))]

    calls: list = []
    real_resized_crop, real_hflip = tv_functional.resized_crop, tv_functional.hflip

    def recording_resized_crop(image, top, left, height, width, *args, **kwargs):
        calls.append(("crop", (top, left, height, width)))
        return real_resized_crop(image, top, left, height, width, *args, **kwargs)

    def recording_hflip(image):
        calls.append(("flip", True))
        return real_hflip(image)

    monkeypatch.setattr(tv_functional, "resized_crop", recording_resized_crop)
    monkeypatch.setattr(tv_functional, "hflip", recording_hflip)
    cpu_draws = []
    for key in keys:
        calls.clear()
        cpu_samples[key]
        flipped = ("flip", True) in calls
        cpu_draws.append(next(box for name, box in calls if name == "crop") + (flipped,))
    monkeypatch.undo()

    device_draws = [tuple(device_samples[key][1]) + (device_samples[key][2],) for key in keys]
    assert device_draws == cpu_draws
    # not a vacuous match: every sample and epoch has its own box, and both flip outcomes occur
    assert len({draw[:4] for draw in cpu_draws}) == len(keys)
    assert {draw[4] for draw in cpu_draws} == {True, False}


def test_jpeg_bytes_travel_undecoded_and_odd_files_as_pixels(tmp_path):
    root = write_jpeg_tree(tmp_path)
    samples = module(root, "device")._samples("train")
    labels_b = {
        path.split("/")[-1]: samples[i][0] for i, (path, label) in enumerate(samples.samples) if label
    }
    assert labels_b["3.JPEG"].dim() == 1  # bytes: decoded on the device
    assert labels_b["0.JPEG"].dim() == 1  # grayscale JPEG: nvJPEG/libjpeg decode it to RGB
    assert labels_b["1.JPEG"].shape == (3, 80, 50)  # CMYK JPEG: PIL's conversion, as the CPU path's
    assert labels_b["2.JPEG"].shape == (3, 64, 64)  # a PNG named .JPEG (ImageNet has one)


def test_a_batch_of_pixels_alone_needs_no_jpeg_decoder(tmp_path):
    """A batch that holds only PIL-decoded files (PNGs, CMYK JPEGs): decode_jpeg refuses an empty list."""
    datamodule = module(write_jpeg_tree(tmp_path), "device")
    samples = datamodule._samples("val")
    odd = [
        samples[i] for i, (path, _) in enumerate(samples.samples) if path.endswith(("b/1.JPEG", "b/2.JPEG"))
    ]
    assert [sample[0].dim() for sample in odd] == [3, 3]
    batch = collate_encoded(odd, split="val")
    images, labels = decoded(datamodule, batch)
    assert images.shape == (2, 3, 24, 24) and labels.tolist() == [1, 1]


def test_the_decoders_agree_bit_for_bit_here(tmp_path):
    """The tolerance below is the resize's alone because libjpeg-turbo decodes for both PIL and torchvision on
    a CPU (same IDCT, same fancy chroma upsampling). nvJPEG is another decoder: see tests/gpu."""
    path = write_jpeg_tree(tmp_path, odd_files=False) / "train" / "a" / "0.JPEG"
    raw = path.read_bytes()
    (ours,) = decode_jpeg([torch.frombuffer(bytearray(raw), dtype=torch.uint8)], mode=ImageReadMode.RGB)
    pil = torch.from_numpy(np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))).permute(2, 0, 1)
    assert torch.equal(ours, pil)


@pytest.mark.parametrize("split", ["train", "val"])
def test_pixels_agree_with_the_pil_path_within_one_level(tmp_path, split):
    """The batch's antialiased bilinear resize in float32 (`batched_resize`, as torchvision resizes uint8 on a
    GPU) against PIL's fixed-point bilinear: the same triangle filter, rounded at another point, so at most 1
    of 255 apart (measured here: max 1; 14 % of the train and val crops' values differ, by 1; torchvision's
    uint8 CPU kernel, PIL's arithmetic, differed in 1.5 %). A box or flip off by a pixel moves smooth
    gradients by more than 1. Compared in pixel units (times std)."""
    root = write_jpeg_tree(tmp_path)
    cpu, device = module(root, "cpu"), module(root, "device")
    if split == "train":
        cpu_batches, device_batches = cpu.train_dataloader(), device.train_dataloader()
    else:
        cpu_batches, device_batches = cpu.val_dataloader(), device.val_dataloader()
    std = torch.tensor(pipelines.IMAGENET_STD).view(1, 3, 1, 1)
    differing, total = 0, 0
    for (cpu_images, cpu_labels), batch in zip(cpu_batches, device_batches, strict=True):
        assert isinstance(batch[0], EncodedImages)
        images, labels = decoded(device, batch)
        assert torch.equal(labels, cpu_labels) and images.shape == cpu_images.shape
        levels = ((images - cpu_images) * std).abs()  # pixel units (0-255)
        assert float(levels.max()) <= 1 + 1e-3
        differing += int((levels > 0.5).sum())
        total += levels.numel()
    assert differing < 0.2 * total  # most pixels are identical: the same crop and flip, not a near one


def test_batches_come_out_float_normalised_in_channels_last(tmp_path):
    datamodule = module(write_jpeg_tree(tmp_path), "device")
    images, labels = decoded(datamodule, next(iter(datamodule.train_dataloader())))
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64


def test_a_mid_epoch_resume_yields_the_remaining_batches_bit_for_bit(tmp_path):
    """As Lightning resumes (loader ``state_dict``/``load_state_dict``, stored in the checkpoint), with a worker
    process: the bytes, crops and flips cross a process boundary and the order continues where it stopped."""
    root = write_jpeg_tree(tmp_path)
    first = module(root, "device", num_workers=1)
    loader = first.train_dataloader()
    loader.sampler.set_epoch(1)  # a later epoch: its order and draws differ from epoch 0's
    batches = iter(loader)
    decoded(first, next(batches))
    state = loader.state_dict()
    assert state == {"epoch": 1, "samples_consumed": 4}
    unbroken = [decoded(first, batch) for batch in batches]

    second = module(root, "device", num_workers=1)
    resumed_loader = second.train_dataloader()
    resumed_loader.load_state_dict(state)
    resumed = [decoded(second, batch) for batch in resumed_loader]
    assert len(resumed) == len(unbroken) == 2
    for (images, labels), (expected_images, expected_labels) in zip(resumed, unbroken, strict=True):
        assert torch.equal(images, expected_images) and torch.equal(labels, expected_labels)


def test_a_bad_decode_value_names_the_choices(tmp_path):
    with pytest.raises(UserError, match="data.decode must be one of cpu, device, got 'gpu'"):
        module(tmp_path, "gpu")


def test_the_command_line_selects_the_device_path_and_refuses_other_values_in_one_line():
    from lightning_lars.config.jobs import compose_job
    from lightning_lars.recipe.plan import check_command_line

    folder = ["data=imagefolder", "data.root=/data/imagenet"]
    assert compose_job(folder).data.decode == "cpu"  # today's behaviour stays the default
    assert compose_job([*folder, "data.decode=device"]).data.decode == "device"
    with pytest.raises(UserError) as raised:
        check_command_line(["recipe=demo", *folder, "data.decode=gpu"])
    assert "\n" not in str(raised.value)
    # OmegaConf's own words for the schema's enum, with the key
    assert "Invalid value 'gpu', expected one of [cpu, device]" in str(raised.value)
    assert "full_key: data.decode" in str(raised.value)


def test_decoding_a_batch_warns_nothing_though_torchvision_deprecates_its_decoders(tmp_path):
    """torchvision 0.29 warns on every decode_jpeg call (TorchCodec supersedes it: pytorch/vision#9622, the
    cherry-pick for release 0.29); a training log would carry one per batch. The installed torchvision warns
    exactly when its version is 0.29 or later (the oldest supported, 0.26, does not), ours never."""
    raw = (write_jpeg_tree(tmp_path, odd_files=False) / "train" / "a" / "0.JPEG").read_bytes()
    jpeg = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        decode_jpeg([jpeg], mode=ImageReadMode.RGB)
    deprecated = [w for w in theirs if "TorchVision are deprecated" in str(w.message)]
    release = Version(torchvision.__version__.split("+")[0]).release
    assert bool(deprecated) == (release >= (0, 29)), [str(w.message) for w in theirs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (ours,) = decode_jpegs([jpeg], CPU)
    pil = torch.from_numpy(np.array(Image.open(io.BytesIO(raw)).convert("RGB"))).permute(2, 0, 1)
    assert torch.equal(ours, pil)


FEW_OPEN_FILES = """\
import functools, resource, sys
import torch
from torch.utils.data import DataLoader, Dataset
from lightning_lars.data import pipelines
from lightning_lars.data.device_decode import EncodedSamples, collate_encoded
from torchvision.datasets import ImageFolder

resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
ops = pipelines.parse_pipeline("train", pipelines.DEFAULT_PIPELINE["train"])
samples = EncodedSamples(ImageFolder(sys.argv[1]).samples, ops)

class Repeated(Dataset):  # 240 samples from the tree's 12
    def __len__(self):
        return 240
    def __getitem__(self, index):
        return samples[index % len(samples)]

loader = DataLoader(Repeated(), batch_size=240, num_workers=2,
                    collate_fn=functools.partial(collate_encoded, split="train"))
for encoded, labels in loader:
    assert len(encoded) == 240 and all(item.dim() in (1, 3) for item in encoded.data)
    print("batch", len(encoded), torch.multiprocessing.get_sharing_strategy())
"""


def test_a_workers_batch_of_bytes_passes_under_a_limit_of_128_open_files(tmp_path):
    """torch shares each tensor a worker returns through a file descriptor of its own: a batch of 240 separate
    byte tensors under a limit of 128 open files fails in torch's own DataLoader ("received 0 items of ancdata");
    the batch travels as one buffer."""
    root = write_jpeg_tree(tmp_path)
    # ~6 s; a batch of separate tensors hangs the loader here rather than failing
    done = run([sys.executable, "-c", FEW_OPEN_FILES, root / "train"], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["batch", "240", "file_descriptor"]
