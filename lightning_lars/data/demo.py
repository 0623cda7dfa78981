"""The embedded demo dataset: procedurally drawn shapes, written as real JPEGs in ImageFolder layout.

The class of an image is the *shape* of its one large foreground object (circle, star, crescent, ...).
Everything else is random per image and independent of the class: foreground colour, size, position,
rotation, a noisy low-frequency background and thin distractor strokes. So neither the mean colour nor
any single pixel gives the label, but a small CNN learns it within an epoch (the drawing: `demo_shapes`).

Every image is drawn from its own RNG seeded by ``(seed, split, class, index)``: the same arguments give
the same pixels and the same JPEG bytes on every run, independent of generation order.

    python -m lightning_lars.data.demo --out data/demo      # JPEGs in data/demo/jpeg, then FFCV files
"""

import argparse
import json
import multiprocessing
import os
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from lightning_lars.core.atomic_files import write_json_atomic
from lightning_lars.core.errors import UserError
from lightning_lars.data import integrity
from lightning_lars.data.beton_header import read_num_samples
from lightning_lars.data.demo_shapes import MAX_CLASSES, class_names, draw_image
from lightning_lars.data.prepare import convert, run_cli

JPEG_QUALITY = 90  # of the demo JPEG files (PIL/libjpeg quality, 1-95)
SPLIT_IDS = {"train": 0, "val": 1}
PARAMS_FILE = "demo_params.json"  # written last into the JPEG root: marks a complete generation


def _write_class(job):
    root, split, class_index, name, count, size, seed = job
    class_dir = Path(root) / split / name
    class_dir.mkdir(parents=True, exist_ok=True)
    for image_index in range(count):
        rng = np.random.default_rng([seed, SPLIT_IDS[split], class_index, image_index])
        Image.fromarray(draw_image(name, size, rng)).save(
            class_dir / f"{name}_{image_index:05d}.JPEG", quality=JPEG_QUALITY
        )


def make_demo_images(
    root, num_classes=10, train_per_class=500, val_per_class=100, size=32, seed=0, num_workers=None
):
    """Write ``root/{train,val}/<shape>/<shape>_<index>.JPEG``; return the list of class names.

    Deterministic: same arguments, same bytes, whatever ``num_workers`` (processes; default all cores).
    Files of the same name are overwritten; other files in ``root`` are left alone (``prepare_demo``
    clears its JPEG folder before regenerating).
    """
    names = class_names(num_classes)
    jobs = [
        (str(root), split, class_index, name, count, size, seed)
        for split, count in (("train", train_per_class), ("val", val_per_class))
        for class_index, name in enumerate(names)
    ]
    num_workers = min(num_workers or len(os.sched_getaffinity(0)), len(jobs))
    if num_workers > 1:
        with multiprocessing.Pool(num_workers) as pool:
            pool.map(_write_class, jobs, chunksize=1)
    else:
        for job in jobs:
            _write_class(job)
    return names


def _read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _damaged_files(out, manifest):
    """The .beton files in ``out`` whose header, size, sample count or checksums disagree with ``manifest``."""

    damaged = []
    for split in SPLIT_IDS:
        path = out / f"{split}.beton"
        try:
            intact = read_num_samples(str(path), "") == manifest["splits"][split]["num_images"]
            found = integrity.recorded(manifest, path.name)  # same-size damage too: 25 MiB, read in ~0.1 s
            intact = intact and (found is None or integrity.check_file(path, *found) is None)
        except (UserError, KeyError, TypeError):
            intact = False
        if not intact:
            damaged.append(str(path))
    return damaged


def prepare_demo(
    out,
    *,
    num_classes=10,
    train_per_class=500,
    val_per_class=100,
    size=32,
    seed=0,
    force=False,
    num_workers=None,
    progress=True,
):
    """Generate the demo JPEGs under ``out/jpeg`` and convert them to ``out/{train,val}.beton``.

    A no-op (returns None) when complete outputs made with the same parameters exist and ``force`` is
    False; otherwise returns the conversion report of :func:`lightning_lars.data.prepare.convert`.
    """

    out = Path(out)
    jpeg_root = out / "jpeg"
    params = {
        "num_classes": num_classes,
        "train_per_class": train_per_class,
        "val_per_class": val_per_class,
        "size": size,
        "seed": seed,
        "jpeg_quality": JPEG_QUALITY,
    }
    manifest = _read_json(out / integrity.MANIFEST_NAME)
    complete = (
        manifest is not None
        and manifest.get("demo") == params
        and all((out / f"{split}.beton").is_file() for split in SPLIT_IDS)
    )
    damaged = _damaged_files(out, manifest) if complete else []
    if complete and not damaged and not force:
        print(f"demo data already complete in {out} (to redo it: make demo-data args=--force)")
        return None
    if damaged:
        print(
            f"{', '.join(damaged)} damaged (truncated or changed since it was written): converting again",
            file=sys.stderr,
        )
    if force or _read_json(jpeg_root / PARAMS_FILE) != params:
        # stale classes or extra files would leak into the betons
        shutil.rmtree(jpeg_root, ignore_errors=True)
        make_demo_images(jpeg_root, num_classes, train_per_class, val_per_class, size, seed, num_workers)
        write_json_atomic(jpeg_root / PARAMS_FILE, params)
    # Raw pixels: the images are tiny (3 KiB each), raw is deterministic and the fastest to load on CPU.
    # 2 MiB pages (FFCV's minimum): each writer process pads its last page, 8 MiB would triple the files.
    return convert(
        jpeg_root,
        out,
        max_resolution=size,
        write_mode="raw",
        num_workers=num_workers,
        progress=progress,
        page_size=1 << 21,
        manifest_extra={"demo": params},
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m lightning_lars.data.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", default="data/demo", help="output folder (default: data/demo)")
    parser.add_argument("--num-classes", type=int, default=10, help=f"2..{MAX_CLASSES} (default: 10)")
    parser.add_argument("--train-per-class", type=int, default=500, help="default: 500")
    parser.add_argument("--val-per-class", type=int, default=100, help="default: 100")
    parser.add_argument("--size", type=int, default=32, help="image side in pixels (default: 32)")
    parser.add_argument("--seed", type=int, default=0, help="default: 0")
    parser.add_argument(
        "--workers", type=int, default=None, help="generation and conversion processes (default: all cores)"
    )
    parser.add_argument("--force", action="store_true", help="regenerate and reconvert even if complete")
    args = parser.parse_args(argv)

    return run_cli(
        lambda: prepare_demo(
            args.out,
            num_classes=args.num_classes,
            train_per_class=args.train_per_class,
            val_per_class=args.val_per_class,
            size=args.size,
            seed=args.seed,
            force=args.force,
            num_workers=args.workers,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
