"""The device path resizes a batch with two matmuls (lightning_lars/data/batched_resize.py) instead of one
antialiased resize per image: the same values as torch's own per-image kernel (``F.interpolate(antialias=True)``
on float, what torchvision runs for uint8 on a GPU) to float rounding, and far fewer operations dispatched per
batch, counted with torch.profiler on the CPU as the proxy for GPU kernel launches."""

from __future__ import annotations

import sys

import torch
from helpers import run
from torch.profiler import ProfilerActivity, profile
from torchvision.transforms.v2 import functional as F

from lightning_lars.data import pipelines
from lightning_lars.data.batched_resize import resize_batch
from lightning_lars.data.device_decode import DeviceImageOps, EncodedImages

# (height, width) px: downscaled, upscaled, thin in either direction, already the output size
SHAPES = [(40, 50), (10, 12), (100, 33), (64, 64), (7, 300), (32, 32), (211, 97), (33, 31)]
SIDE = 32


def images(shapes=SHAPES, seed=0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (3, h, w), generator=generator, dtype=torch.uint8) for h, w in shapes]


def torchs_own(image: torch.Tensor, size) -> torch.Tensor:
    """torch's antialiased bilinear kernel on one float image: the oracle."""
    return torch.nn.functional.interpolate(
        image[None].float(), size=size, mode="bilinear", antialias=True, align_corners=False
    )[0]


def test_a_batch_resize_equals_torchs_per_image_kernel_to_float_rounding(monkeypatch):
    crops = images()
    expected = torch.stack([torchs_own(crop, (SIDE, SIDE)) for crop in crops])
    # compare before the rounding to uint8 values
    monkeypatch.setattr(torch.Tensor, "round_", lambda self: self)
    unrounded = resize_batch(crops, SIDE)
    monkeypatch.undo()
    torch.testing.assert_close(unrounded, expected, rtol=0, atol=1e-3)  # pixel units; measured 5e-5
    rounded = resize_batch(crops, SIDE)
    assert torch.equal(rounded, rounded.round()) and 0 <= float(rounded.min()) and float(rounded.max()) <= 255


def test_the_batch_resize_leaves_the_runs_matmul_precision_as_it_found_it(monkeypatch):
    """Recipes set ``torch.set_float32_matmul_precision("high")`` (TF32); the resize turns TF32 off for its own
    matmuls only, through the per-backend setting: with the legacy ``allow_tf32`` torch's getter raises while
    the two APIs disagree."""
    before, seen, real_matmul = torch.get_float32_matmul_precision(), [], torch.matmul

    def recording_matmul(*args):
        seen.append((torch.backends.cuda.matmul.fp32_precision, torch.get_float32_matmul_precision()))
        return real_matmul(*args)

    monkeypatch.setattr(torch, "matmul", recording_matmul)
    try:
        torch.set_float32_matmul_precision("high")
        resize_batch(images()[:2], SIDE)
        assert seen == [("ieee", "high")] * 2  # IEEE float32 in the resize; the run's setting readable
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    finally:
        torch.set_float32_matmul_precision(before)


def test_a_centre_crop_after_a_short_side_resize_equals_torchvisions():
    ops = pipelines.parse_pipeline("val", pipelines.DEFAULT_PIPELINE["val"])
    # resize the short side to round(32 / 0.875) = 37, keep the centre 32
    device_ops = DeviceImageOps(ops, SIDE)
    crops = images()
    got = device_ops.resized(crops, [(0, 0, *crop.shape[-2:]) for crop in crops])
    for image, ours in zip(crops, got, strict=True):
        expected = F.center_crop(
            F.resize(image.float(), [device_ops.short_side], antialias=True), [SIDE, SIDE]
        )
        assert float((ours - expected).abs().max()) <= 0.5 + 1e-3  # ours rounded, the oracle not


# ops that only make a view or allocate: no kernel launch on a GPU
NO_KERNEL = {
    *("as_strided", "slice", "select", "alias", "view", "narrow", "empty", "empty_strided", "resolve_conj"),
    *("lift_fresh", "detach", "detach_", "unsqueeze", "transpose", "expand", "t", "_unsafe_view", "permute"),
    *("_reshape_alias", "squeeze", "unbind", "reshape", "empty_like"),
    *("to", "_to_copy"),  # a cast or copy counts by its copy_; a no-op ``to`` (same device) launches nothing
}


def kernel_ops(function) -> int:
    """aten ops that would launch a kernel: the lowest ops of the dispatch tree that are neither views nor
    allocations (a composite op, as matmul or to, counts by the kernels it calls)."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        function()

    def launches(event) -> bool:
        return event.name.startswith("aten::") and event.name.removeprefix("aten::") not in NO_KERNEL

    def lowest(event) -> bool:
        stack = list(event.cpu_children)
        while stack:
            child = stack.pop()
            if launches(child):
                return False
            stack.extend(child.cpu_children)
        return True

    return sum(launches(event) and lowest(event) for event in profiler.events())


def per_image_path(crops, boxes):
    """The path this replaced, as torchvision's ``resize_image`` runs a uint8 image on a GPU (its native uint8
    kernel is CPU-only): crop, cast to float32, antialiased resize, clamp, round, cast back; then a stack."""
    resized = []
    for crop, (top, left, height, width) in zip(crops, boxes, strict=True):
        image = crop[:, top : top + height, left : left + width].to(torch.float32)
        image = torch.nn.functional.interpolate(
            image[None], size=(SIDE, SIDE), mode="bilinear", antialias=True, align_corners=False
        )[0]
        resized.append(image.clamp_(min=0, max=255).round_().to(torch.uint8))
    return torch.stack(resized)


def test_the_kernels_a_batch_launches_grow_by_one_copy_an_image_not_five():
    """Per image the old path launched a cast, the resize, a clamp, a round and a cast back (5: ~1,300 for a
    batch of 256, with the stack and flips ~1,500); the batched one launches the copy into the padded batch,
    plus a fixed ~60 a size group for the weights and two matmuls. Slopes from batches of 16 and 48 images (each
    shape twice at least: both size groups hold several crops)."""
    ops = DeviceImageOps(pipelines.parse_pipeline("train", pipelines.DEFAULT_PIPELINE["train"]), SIDE)
    counts = {}
    for count in (16, 48):
        crops = images([SHAPES[i % len(SHAPES)] for i in range(count)], seed=count)
        boxes = [(1, 2, crop.shape[-2] - 1, crop.shape[-1] - 2) for crop in crops]
        encoded = EncodedImages(crops, torch.tensor(boxes), torch.zeros(count, dtype=torch.bool), "train")
        counts[count] = (
            kernel_ops(lambda: per_image_path(crops, boxes)),  # noqa: B023 - called at once
            kernel_ops(lambda: ops(encoded, torch.device("cpu"))),  # noqa: B023
        )
    (old_16, new_16), (old_48, new_48) = counts[16], counts[48]
    old_slope, new_slope = (old_48 - old_16) / 32, (new_48 - new_16) / 32
    fixed = new_48 - 48 * new_slope
    print(f"kernels an image: per-image path {old_slope}, batched {new_slope} + {fixed:.0f} a batch")
    assert old_slope == 5 and new_slope == 1
    assert new_48 < old_48 and fixed + 256 * new_slope < (old_48 / 48 * 256) / 3  # at 256 images: < 1/3


ONE_LARGE_CROP = """\
import resource, torch
from lightning_lars.data.batched_resize import resize_batch
crops = [torch.zeros(3, 200, 200, dtype=torch.uint8) for _ in range(48)]
crops.append(torch.zeros(3, 3000, 3000, dtype=torch.uint8))  # 27 MB: one photo of a folder like ImageNet's
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert resize_batch(crops, 32).shape == (49, 3, 32, 32)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)  # MiB the resize added at its peak
"""


def test_one_large_crop_does_not_pad_the_whole_batch_to_its_size():
    """Crops resize in groups of similar size: one 3,000 px crop among 48 of 200 px pads only itself (as one
    batch, the 49 padded to 3,000 px took 6.4 GiB, bytes and their float copy; here it adds ~160 MiB). The
    kernel's peak memory, read by the OS in a process of its own."""
    done = run([sys.executable, "-c", ONE_LARGE_CROP], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 1024


def test_crops_of_three_size_groups_each_equal_torchs_per_image_kernel(monkeypatch):
    shapes = [(40, 50), (300, 280), (1100, 700), (64, 64), (513, 90), (30, 700)]  # longer sides in 3 groups
    crops = images(shapes, seed=5)
    expected = torch.stack([torchs_own(crop, (SIDE, SIDE)) for crop in crops])
    monkeypatch.setattr(torch.Tensor, "round_", lambda self: self)  # compare before the rounding
    torch.testing.assert_close(resize_batch(crops, SIDE), expected, rtol=0, atol=1e-3)
