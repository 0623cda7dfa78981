"""make bench-data: images/s of the torchvision baseline, of the same loader with data.decode=device, and of our
FFCV pipeline on the same JPEGs, one run.

Generates ImageNet-sized JPEGs (300-500 px a side, noise plus random shapes, quality 90) in a temp dir,
converts them with ``lightning_lars.data.prepare.convert`` (timed: conversion img/s), then times one train
epoch of each loader (the DataModules' default pipeline: random resized crop + flip + normalise, batch 64) at
the recipes' train resolutions, after a warm-up pass (FFCV's JIT compile and the DataLoader's worker start are
not counted). The ceiling is the single-core JPEG decode rate of the source files (cv2, libjpeg-turbo)
times the worker count.
The decode=device row counts the batch's decode, crop and normalisation on the device (CUDA if present, else this
CPU: there it is slower than PIL in the workers, as it decodes in the main process; the row is for a GPU job).

Usage: python benchmarks/bench_data.py [--images 1200] [--workers 2] [--resolutions 176 224]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from lightning_lars.data.pipelines import DEFAULT_PIPELINE

NUM_CLASSES = 10
BATCH = 64


def make_jpegs(root: Path, count: int, seed: int = 0, first: int = 0) -> list[Path]:
    """``root/{train,val}/<class>/*.jpg``: noise background with random ellipses and polygons, 300-500 px.
    Files are numbered from ``first``, so processes with their own seeds can fill one tree."""
    rng = np.random.default_rng(seed)
    paths = []
    for split, split_count in (("train", count), ("val", max(NUM_CLASSES, count // 10))):
        for index in range(first, first + split_count):
            width, height = (int(x) for x in rng.integers(300, 501, size=2))
            base = rng.integers(0, 256, size=3)
            # low-frequency noise: JPEG-realistic
            noise = rng.normal(0, 40, size=(height // 4, width // 4, 3))
            pixels = np.clip(base + np.kron(noise, np.ones((4, 4, 1)))[:height, :width], 0, 255)
            image = Image.fromarray(pixels.astype(np.uint8))
            draw = ImageDraw.Draw(image)
            for _ in range(int(rng.integers(3, 9))):
                x0, y0 = int(rng.integers(0, width - 40)), int(rng.integers(0, height - 40))
                x1, y1 = x0 + int(rng.integers(20, width // 2)), y0 + int(rng.integers(20, height // 2))
                color = tuple(int(c) for c in rng.integers(0, 256, size=3))
                if rng.random() < 0.5:
                    draw.ellipse((x0, y0, x1, y1), fill=color)
                else:
                    draw.polygon(
                        [(int(rng.integers(x0, x1 + 1)), int(rng.integers(y0, y1 + 1))) for _ in range(5)],
                        fill=color,
                    )
            folder = root / split / f"class{index % NUM_CLASSES:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{index:05d}.jpg"
            image.save(path, quality=90)
            if split == "train":
                paths.append(path)
    return paths


def decode_rate_one_core(paths: list[Path]) -> tuple[float, float]:
    """(cv2 img/s, PIL img/s) decoding the source JPEGs in this process with one thread."""
    import cv2

    cv2.setNumThreads(1)
    blobs = [np.frombuffer(path.read_bytes(), dtype=np.uint8) for path in paths]
    started = time.perf_counter()
    for blob in blobs:
        cv2.imdecode(blob, cv2.IMREAD_COLOR)
    cv2_rate = len(blobs) / (time.perf_counter() - started)
    started = time.perf_counter()
    for path in paths:
        with Image.open(path) as image:
            image.convert("RGB")
    return cv2_rate, len(paths) / (time.perf_counter() - started)


def time_epoch(loader, epoch: int, to_device=None) -> float:
    """img/s over one full epoch, ``to_device(batch)`` included (the DataModule's transfer, as Lightning calls
    it); the caller warms the loader up first."""
    sampler = getattr(loader, "sampler", None)
    if hasattr(sampler, "set_epoch"):  # what Lightning does: a new epoch, not the rest of the warm-up one
        sampler.set_epoch(epoch)
    images, started = 0, time.perf_counter()
    for batch in loader:
        batch_images, _ = batch if to_device is None else to_device(batch)
        images += len(batch_images)
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # the device's queued decodes and crops belong to this epoch
    return images / (time.perf_counter() - started)


def warm_up(loader, batches: int = 3, to_device=None) -> None:
    for index, batch in enumerate(loader):
        if to_device is not None:
            to_device(batch)
        if index + 1 == batches:
            break


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=1200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--resolutions", type=int, nargs="+", default=[176, 224])
    parser.add_argument(
        "--max-resolution", type=int, default=256, help="longer side stored in the .beton (px)"
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="timed epochs per loader; the median is reported"
    )
    args = parser.parse_args(argv)

    from lightning_lars.data.ffcv_datamodule import FFCVDataModule
    from lightning_lars.data.prepare import convert
    from lightning_lars.data.torchvision_datamodule import TorchvisionDataModule

    with tempfile.TemporaryDirectory(prefix="bench_data_") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        paths = make_jpegs(root / "jpeg", args.images)
        print(
            f"generated {len(paths)} train JPEGs in {time.perf_counter() - started:.1f} s "
            f"({sum(p.stat().st_size for p in paths) / len(paths) / 1024:.0f} KiB each)"
        )
        cv2_rate, pil_rate = decode_rate_one_core(paths)

        started = time.perf_counter()
        convert(
            root / "jpeg",
            root / "ffcv",
            max_resolution=args.max_resolution,
            num_workers=args.workers,
            progress=False,
            page_size=1 << 21,
        )
        total_images = args.images + max(NUM_CLASSES, args.images // 10)
        convert_rate = total_images / (time.perf_counter() - started)

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        rows = []
        for resolution in args.resolutions:
            baseline, device_decode = (
                TorchvisionDataModule(
                    root / "jpeg",
                    NUM_CLASSES,
                    batch_size=BATCH,
                    num_workers=args.workers,
                    resolution=resolution,
                    pipeline=DEFAULT_PIPELINE,
                    pin_memory=False,
                    decode=decode,
                )
                for decode in ("cpu", "device")
            )
            ffcv = FFCVDataModule(
                root / "ffcv" / "train.beton",
                root / "ffcv" / "val.beton",
                NUM_CLASSES,
                batch_size=BATCH,
                num_workers=args.workers,
                resolution=resolution,
                pipeline=DEFAULT_PIPELINE,
            )
            ffcv.setup("fit")
            loaders = {
                "torchvision ImageFolder + PIL": baseline.train_dataloader(),
                f"torchvision, decode=device ({device.type})": device_decode.train_dataloader(),
                f"FFCV (max_resolution {args.max_resolution})": ffcv.train_dataloader(),
            }
            transfers = {  # decode=device does its work in the transfer to the device
                name: None
                if "decode=device" not in name
                else partial(device_decode.transfer_batch_to_device, device=device, dataloader_idx=0)
                for name in loaders
            }
            for name, loader in loaders.items():
                warm_up(loader, to_device=transfers[name])
            rates = {name: [] for name in loaders}
            # interleaved, so load from other processes hits both alike
            for epoch in range(1, args.repeats + 1):
                for name, loader in loaders.items():
                    rates[name].append(time_epoch(loader, epoch, transfers[name]))
            base_rate = statistics.median(rates["torchvision ImageFolder + PIL"])
            for name, measured in rates.items():
                rows.append(
                    (
                        name,
                        resolution,
                        statistics.median(measured),
                        min(measured),
                        max(measured),
                        statistics.median(measured) / base_rate,
                    )
                )

    print(
        f"\nmachine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores; batch {BATCH}, "
        f"{args.workers} workers, {args.images} train images, median of {args.repeats} epochs; "
        f"load average at the end {os.getloadavg()[0]:.1f} (other processes share these cores)"
    )
    print(f"conversion (prepare.convert, checks included, {args.workers} workers): {convert_rate:,.0f} img/s")
    print(
        f"single-core decode of the source JPEGs: cv2 {cv2_rate:,.0f} img/s, PIL {pil_rate:,.0f} img/s "
        f"(ceiling for a decode-from-source loader on {args.workers} cores: {args.workers * cv2_rate:,.0f} img/s)"
    )
    print("\n| loader | train px | img/s (median) | min-max | vs torchvision |")
    print("|---|---|---|---|---|")
    for name, resolution, median, low, high, ratio in rows:
        print(f"| {name} | {resolution} | {median:,.0f} | {low:,.0f}-{high:,.0f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
