"""Conversion throughput (images/s): our ``prepare.convert`` vs the ffcv-imagenet way, same files, same run.

ffcv-imagenet's ``write_imagenet.py`` feeds ``torchvision.datasets.ImageFolder`` (full PIL decode) straight into
FFCV's ``DatasetWriter``. ``convert`` first decodes every file once to find bad ones (a second decode), but
decodes JPEGs with libjpeg's DCT scaling when ``max_resolution`` is below the source size.

    PYTHONPATH=. python benchmarks/bench_prepare.py [--images 400] [--workers 2] [--max-resolution 256]
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image


def make_imagenet_like_jpegs(root, num_images, num_classes=4, seed=0):
    """JPEGs of ImageNet's typical sizes (333-500 px sides), smooth content plus noise, quality 90."""
    rng = np.random.default_rng(seed)
    for index in range(num_images):
        width, height = int(rng.integers(400, 501)), int(rng.integers(333, 401))
        coarse = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
        pixels = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), dtype=np.int16)
        pixels = np.clip(pixels + rng.integers(-20, 21, size=pixels.shape), 0, 255).astype(np.uint8)
        path = Path(root) / "train" / f"class{index % num_classes}" / f"{index:06d}.JPEG"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path, quality=90)


def ffcv_imagenet_way(src, out_file, max_resolution, workers):
    """What ffcv-imagenet's write_imagenet.py does (write_mode proportion, 0.5, quality 90)."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from torchvision.datasets import ImageFolder

    writer = DatasetWriter(
        str(out_file),
        {
            "image": RGBImageField(
                write_mode="proportion",
                max_resolution=max_resolution,
                compress_probability=0.5,
                jpeg_quality=90,
            ),
            "label": IntField(),
        },
        num_workers=workers,
    )
    writer.from_indexed_dataset(ImageFolder(str(src / "train")), chunksize=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-resolution", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each; best time is kept")
    args = parser.parse_args()
    from lightning_lars.data.prepare import convert

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        make_imagenet_like_jpegs(src, args.images)
        timings = {
            "ffcv-imagenet way (ImageFolder + DatasetWriter)": [],
            "lightning_lars convert (check + write)": [],
        }
        for repeat in range(args.repeats):  # alternate, so load from other processes hits both alike
            start = time.perf_counter()
            ffcv_imagenet_way(src, Path(tmp) / f"upstream{repeat}.beton", args.max_resolution, args.workers)
            timings["ffcv-imagenet way (ImageFolder + DatasetWriter)"].append(time.perf_counter() - start)
            start = time.perf_counter()
            convert(
                src,
                Path(tmp) / f"ours{repeat}",
                max_resolution=args.max_resolution,
                num_workers=args.workers,
                splits=("train",),
                progress=False,
            )
            timings["lightning_lars convert (check + write)"].append(time.perf_counter() - start)
        sizes = {
            name: os.path.getsize(path)
            for name, path in (
                ("upstream", Path(tmp) / "upstream0.beton"),
                ("ours", Path(tmp) / "ours0" / "train.beton"),
            )
        }

    baseline = min(next(iter(timings.values())))
    print(
        f"\n{args.images} JPEGs of 400-500 x 333-400 px, max_resolution {args.max_resolution}, "
        f"{args.workers} workers, best of {args.repeats}"
    )
    print("| method | seconds | images/s | speed vs ffcv-imagenet way |")
    print("|---|---|---|---|")
    for name, seconds in timings.items():
        best = min(seconds)
        print(f"| {name} | {best:.2f} | {args.images / best:.0f} | {baseline / best:.2f}x |")
    print(
        f"file sizes: ffcv-imagenet way {sizes['upstream'] / 1e6:.1f} MB, ours {sizes['ours'] / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    main()
