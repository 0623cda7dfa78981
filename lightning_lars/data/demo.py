"""The embedded demo dataset: procedurally drawn shapes, written as real JPEGs in ImageFolder layout.

The class of an image is the *shape* of its one large foreground object (circle, star, crescent, ...).
Everything else is random per image and independent of the class: foreground colour, size, position,
rotation, a noisy low-frequency background and thin distractor strokes. So neither the mean colour nor
any single pixel gives the label, but a small CNN learns it within an epoch.

Every image is drawn from its own RNG seeded by ``(seed, split, class, index)``: the same arguments give
the same pixels and the same JPEG bytes on every run, independent of generation order.

    python -m lightning_lars.data.demo --out data/demo      # JPEGs in data/demo/jpeg, then FFCV files
"""

import argparse
import json
import math
import multiprocessing
import os
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from lightning_lars.core.atomic_files import write_text_atomic
from lightning_lars.core.errors import UserError
from lightning_lars.data import integrity
from lightning_lars.data.beton_header import read_num_samples
from lightning_lars.data.prepare import MANIFEST_NAME, convert, run_cli

SUPERSAMPLE = 4  # masks are drawn at 4x the stored size, then box-filtered down: anti-aliased edges
JPEG_QUALITY = 90  # of the demo JPEG files (PIL/libjpeg quality, 1-95)
SPLIT_IDS = {"train": 0, "val": 1}
PARAMS_FILE = "demo_params.json"  # written last into the JPEG root: marks a complete generation


def _regular_polygon(num_vertices, radius=1.0, phase=0.0):
    angles = phase + 2 * math.pi * np.arange(num_vertices) / num_vertices
    return [np.stack([radius * np.cos(angles), radius * np.sin(angles)], axis=1)]


def _disc(radius=1.0, centre=(0.0, 0.0)):
    points = _regular_polygon(48, radius)[0]
    return points + np.asarray(centre)


def _star():
    angles = -math.pi / 2 + math.pi * np.arange(10) / 5
    radii = np.where(np.arange(10) % 2 == 0, 1.0, 0.42)
    return [np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)]


def _plus():
    arm = 0.3  # half-width of each bar, in shape radii
    return [
        np.array(
            [
                [-arm, -1],
                [arm, -1],
                [arm, -arm],
                [1, -arm],
                [1, arm],
                [arm, arm],
                [arm, 1],
                [-arm, 1],
                [-arm, arm],
                [-1, arm],
                [-1, -arm],
                [-arm, -arm],
            ],
            dtype=float,
        )
    ]


def _arrow():
    return [
        np.array(
            [[-1, -0.25], [0.15, -0.25], [0.15, -0.7], [1, 0], [0.15, 0.7], [0.15, 0.25], [-1, 0.25]],
            dtype=float,
        )
    ]


def _l_shape():
    return [np.array([[-0.8, -1], [-0.25, -1], [-0.25, 0.45], [0.8, 0.45], [0.8, 1], [-0.8, 1]], dtype=float)]


def _half_disc():
    angles = np.linspace(0, math.pi, 25)
    return [np.stack([np.cos(angles), np.sin(angles) - 0.4], axis=1)]


def _heart():
    t = np.linspace(0, 2 * math.pi, 60, endpoint=False)
    x = 16 * np.sin(t) ** 3
    y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
    return [np.stack([x, y + 2], axis=1) / 16.5]


# Each shape is a list of polygons in unit coordinates; later polygons are cut out (drawn with 0).
SHAPES = {  # the default 10 come first and are the most distinct; later ones add near-lookalikes
    "circle": lambda: [_disc()],
    "triangle": lambda: _regular_polygon(3, 1.0, -math.pi / 2),
    "square": lambda: _regular_polygon(4, 1.0, math.pi / 4),
    "star": _star,
    "cross": _plus,
    "ring": lambda: [_disc(), _disc(0.55)],
    "crescent": lambda: [_disc(), _disc(0.8, (0.45, -0.1))],
    "arrow": _arrow,
    "l_shape": _l_shape,
    "half_disc": _half_disc,
    "heart": _heart,
    "hexagon": lambda: _regular_polygon(6),
    "hollow_square": lambda: _regular_polygon(4, 1.0, math.pi / 4) + _regular_polygon(4, 0.6, math.pi / 4),
    "hollow_triangle": lambda: (
        _regular_polygon(3, 1.0, -math.pi / 2) + _regular_polygon(3, 0.5, -math.pi / 2)
    ),
}
MAX_CLASSES = len(SHAPES)


def class_names(num_classes):
    """The first ``num_classes`` shape names (folder names; sorted, they give the label order)."""
    if not 2 <= num_classes <= MAX_CLASSES:
        raise UserError(f"demo num_classes must be between 2 and {MAX_CLASSES}, got {num_classes}")
    return list(SHAPES)[:num_classes]


def _background(rng, size):
    """A random base colour with low-frequency variation (a bicubic-upsampled 4x4 grid) and pixel noise."""
    base = rng.integers(40, 216, size=3)
    grid = np.clip(base + rng.integers(-50, 51, size=(4, 4, 3)), 0, 255).astype(np.uint8)  # +-50 grey levels
    smooth = np.asarray(Image.fromarray(grid).resize((size, size), Image.BICUBIC), dtype=np.float32)
    noise = rng.normal(0.0, 10.0, size=(size, size, 3))  # std in 8-bit grey levels
    return np.clip(smooth + noise, 0, 255)


def draw_image(shape_name, size, rng):
    """One RGB uint8 image of ``shape_name`` at ``size`` x ``size`` pixels, all nuisances drawn from ``rng``."""
    big = size * SUPERSAMPLE
    mask = Image.new("L", (big, big), 0)
    draw = ImageDraw.Draw(mask)
    radius = rng.uniform(0.28, 0.45) * big  # object radius: 28-45% of the image side
    centre = rng.uniform(radius * 0.8, big - radius * 0.8, size=2)
    angle = rng.uniform(0, 2 * math.pi)
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    for polygon_index, polygon in enumerate(SHAPES[shape_name]()):
        points = polygon @ rotation.T * radius + centre
        draw.polygon([tuple(p) for p in points], fill=255 if polygon_index == 0 else 0)
    alpha = np.asarray(mask.resize((size, size), Image.BOX), dtype=np.float32)[..., None] / 255.0

    image = _background(rng, size)
    # Foreground: a random colour with a mild gradient, far enough from the local background to be seen.
    colour = rng.integers(0, 256, size=3).astype(np.float32)
    local_background = (image * alpha).sum((0, 1)) / max(alpha.sum(), 1.0)
    if np.abs(colour - local_background).sum() < 150:  # sum of |RGB difference|, 8-bit levels
        colour = 255.0 - local_background
    ramp = np.linspace(-25, 25, size, dtype=np.float32)[None, :, None] * rng.choice([-1, 1])
    image = image * (1 - alpha) + np.clip(colour + ramp, 0, 255) * alpha

    # Distractors: a few thin strokes in random colours, drawn over everything.
    canvas = Image.fromarray(image.astype(np.uint8))
    strokes = ImageDraw.Draw(canvas)
    for _ in range(rng.integers(0, 3)):
        x0, y0, x1, y1 = rng.uniform(0, size, size=4)
        strokes.line([(x0, y0), (x1, y1)], fill=tuple(int(c) for c in rng.integers(0, 256, 3)), width=1)
    return np.asarray(canvas)


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


def _write_json_atomic(path, payload):
    write_text_atomic(path, json.dumps(payload, indent=2) + "\n")


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
    manifest = _read_json(out / MANIFEST_NAME)
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
        _write_json_atomic(jpeg_root / PARAMS_FILE, params)
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
