"""Convert an ImageFolder dataset (``train/<class>/*.JPEG``, ``val/<class>/*.JPEG``) into FFCV files.

    python -m lightning_lars.data.prepare --src /data/imagenet --out /data/imagenet_ffcv

writes ``<out>/train.beton`` and ``<out>/val.beton`` (fields ``image``: RGBImageField, ``label``: IntField,
as ffcv-imagenet writes them) and ``<out>/manifest.json`` (classes, counts, skipped files, writer settings,
and each file's size and region checksums: `lightning_lars.data.integrity`).

Each split is done in two passes: a parallel check that fully decodes every file (undecodable files are
skipped and listed, or with ``strict`` the first one is an error), then FFCV's ``DatasetWriter``. Files are
written as ``<name>.tmp-<pid>``, re-opened with ``ffcv.reader.Reader`` and checked, and renamed onto their
final names only after every split succeeded; ``manifest.json`` is removed first and written last, so a
folder with a manifest is always complete. An exception or Ctrl-C removes the temporary files.
"""

import argparse
import os
import sys
import time
from importlib import metadata
from pathlib import Path

from lightning_lars.core.atomic_files import write_json_atomic
from lightning_lars.core.errors import UserError
from lightning_lars.core.extras import require_ffcv
from lightning_lars.data.beton_writer import (
    MIN_PAGE_SIZE,
    NO_SPACE,
    DiskFull,
    LabelledImages,
    default_page_size,
    make_writer_class,
    no_space_message,
    page_size_for,
    verify_beton,
)
from lightning_lars.data.imagefolder import (
    EXPECTED_LAYOUT,
    check_split,
    list_classes,
    list_split,
)
from lightning_lars.data.integrity import ALGORITHM, MANIFEST_NAME, REGION_BYTES, file_checksums
from lightning_lars.data.prepare_checks import (
    WRITE_MODES,
    check_writable,
    remove_stale_temporaries,
    validate_settings,
    warn_about_older_splits,
)


def convert(
    src,
    out,
    *,
    max_resolution=256,
    jpeg_quality=90,
    compress_probability=None,
    write_mode="proportion",
    smart_threshold=None,
    num_workers=None,
    strict=False,
    splits=("train", "val"),
    progress=True,
    seed=0,
    page_size=None,
    manifest_extra=None,
):
    """Convert ``src/<split>/<class>/*`` into ``out/<split>.beton`` plus ``out/manifest.json``.

    Args:
        max_resolution: longer image side stored, in pixels (None keeps the original size).
        jpeg_quality: JPEG quality of the images FFCV stores compressed.
        compress_probability: share of images stored as JPEG in 'proportion' mode (default 0.5).
        write_mode: 'proportion' (ffcv-imagenet's), 'jpg', 'raw' or 'smart' (JPEG above smart_threshold bytes).
        num_workers: processes for checking and writing (default: all usable cores).
        strict: the first undecodable file or empty class folder is a UserError instead of a warning.
        seed: seeds the per-image jpg/raw choice of 'proportion' mode.
        page_size: minimum FFCV page in bytes, a power of two >= 2 MiB (each writer process pads its last
            page, so small datasets want small pages); grown automatically to hold the largest raw image.
            None: chosen from the data (2 MiB below 1 GiB of raw pixels, else FFCV's 8 MiB).
        manifest_extra: extra top-level keys for manifest.json.

    Returns the manifest dict (also written to ``out/manifest.json``).
    """
    require_ffcv(f"converting {src} to FFCV files", "train from the image folders with data=imagefolder")
    num_workers = num_workers or len(os.sched_getaffinity(0))
    settings = {  # the writer's, recorded in the manifest
        "max_resolution": max_resolution,
        "write_mode": write_mode,
        "jpeg_quality": jpeg_quality,
        "compress_probability": compress_probability,
        "smart_threshold": smart_threshold,
        "seed": seed,
        "min_page_size": page_size,
    }
    validate_settings(settings, num_workers=num_workers, splits=splits, page_size=page_size or MIN_PAGE_SIZE)
    if compress_probability is None:
        compress_probability = settings["compress_probability"] = 0.5
    src, out = Path(src), Path(out)
    classes = list_classes(src)
    listings = [list_split(src, split, classes) for split in splits]
    for listing in listings:
        if listing.empty_classes:
            message = (
                f"{listing.name}/ has {len(listing.empty_classes)} empty class folder(s): "
                f"{', '.join(listing.empty_classes[:5])}"
            )
            if strict:
                raise UserError(f"{message}; add images or remove the folders, or drop --strict")
            print(f"warning: {message} (their labels are kept)", file=sys.stderr)
    check_writable(out)
    remove_stale_temporaries(out)
    warn_about_older_splits(out, splits)

    from ffcv.fields import IntField, RGBImageField  # FFCV imports numba (seconds): after the input checks

    writer_class = make_writer_class()
    temporaries, started, images_done, page = {}, time.perf_counter(), 0, page_size or MIN_PAGE_SIZE
    checksums = {}  # per file: its size and each region's CRC, read back from disk as written
    try:
        for listing in listings:
            largest = check_split(listing, num_workers, strict, progress)
            if not listing.samples:
                raise UserError(f"no decodable images in {src / listing.name}; {EXPECTED_LAYOUT}")
            tmp = out / f"{listing.name}.beton.tmp-{os.getpid()}"
            temporaries[listing.name] = tmp
            fields = {
                "image": RGBImageField(
                    write_mode=write_mode,
                    max_resolution=max_resolution,
                    smart_threshold=smart_threshold,
                    jpeg_quality=jpeg_quality,
                    compress_probability=compress_probability,
                ),
                "label": IntField(),
            }
            minimum = page_size or default_page_size(len(listing.samples), largest, max_resolution)
            page = page_size_for(largest, max_resolution, minimum)
            writer = writer_class(
                str(tmp),
                fields,
                page_size=page,
                num_workers=num_workers,
                description=f"write {listing.name}",
                progress=progress,
            )
            writer.from_indexed_dataset(LabelledImages(listing.samples, max_resolution, seed), chunksize=100)
            verify_beton(tmp, [label for _, label in listing.samples])
            checksums[f"{listing.name}.beton"] = file_checksums(tmp)
            images_done += len(listing.samples)
        # from here until the manifest exists, out is incomplete
        (out / MANIFEST_NAME).unlink(missing_ok=True)
        for name, tmp in temporaries.items():
            os.replace(tmp, out / f"{name}.beton")
    except (DiskFull, OSError) as error:
        if isinstance(error, OSError) and error.errno not in NO_SPACE:
            raise
        written = sum(tmp.stat().st_size for tmp in temporaries.values() if tmp.exists())
        for tmp in temporaries.values():
            tmp.unlink(missing_ok=True)
        done = images_done + (error.done if isinstance(error, DiskFull) else 0)
        total = sum(len(listing.samples) for listing in listings)
        pages = num_workers * page  # one page in each writer's memory; each pads its last page, per split
        raise UserError(no_space_message(out, written, done, total, pages, len(listings) * pages)) from None
    finally:
        for tmp in temporaries.values():
            tmp.unlink(missing_ok=True)

    manifest = {
        "src": str(src.resolve()),
        "classes": classes,
        "num_classes": len(classes),
        "splits": {
            listing.name: {
                "num_images": len(listing.samples),
                "num_skipped": len(listing.skipped),
                "empty_classes": listing.empty_classes,
            }
            for listing in listings
        },
        "skipped": [
            {"split": listing.name, "path": path, "reason": reason}
            for listing in listings
            for path, reason in listing.skipped
        ],
        # the installed distribution's: FFCV 1.0.2's own ffcv.__version__ still says 0.0.3rc1
        "writer": {**settings, "ffcv_version": metadata.version("ffcv")},
        "checksums": {"algorithm": ALGORITHM, "region_bytes": REGION_BYTES, "files": checksums},
        "seconds": round(time.perf_counter() - started, 1),
        **(manifest_extra or {}),
    }
    write_json_atomic(out / MANIFEST_NAME, manifest)
    _print_summary(manifest, out)
    return manifest


def _print_summary(manifest, out):
    counts = ", ".join(f"{name} {split['num_images']}" for name, split in manifest["splits"].items())
    print(f"wrote {out}: {manifest['num_classes']} classes, images: {counts} ({manifest['seconds']} s)")
    if manifest["skipped"]:
        print(f"skipped {len(manifest['skipped'])} entries (each with its reason):", file=sys.stderr)
        for entry in manifest["skipped"]:
            print(f"  {entry['path']}: {entry['reason']}", file=sys.stderr)


def run_cli(action):
    """Run ``action()`` as a CLI: UserError -> one line 'error: ...' and exit code 2; Ctrl-C -> 130."""
    try:
        action()
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; no partial output was left behind", file=sys.stderr)
        return 130
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m lightning_lars.data.prepare",
        description="Convert an ImageFolder tree to FFCV .beton files.",
    )
    parser.add_argument("--src", required=True, help="folder holding train/<class>/* and val/<class>/*")
    parser.add_argument(
        "--out", required=True, help="output folder for train.beton, val.beton, manifest.json"
    )
    parser.add_argument(
        "--max-resolution",
        type=int,
        default=256,
        help="longer side stored, pixels; 0 keeps originals (default: 256)",
    )
    parser.add_argument("--write-mode", choices=WRITE_MODES, default="proportion", help="default: proportion")
    parser.add_argument("--jpeg-quality", type=int, default=90, help="default: 90")
    parser.add_argument(
        "--compress-probability",
        type=float,
        default=None,
        help="share stored as JPEG in proportion mode (default: 0.5)",
    )
    parser.add_argument(
        "--smart-threshold", type=int, default=None, help="bytes; needed by --write-mode smart"
    )
    parser.add_argument("--workers", type=int, default=None, help="processes (default: all usable cores)")
    parser.add_argument("--splits", default="train,val", help="comma-separated (default: train,val)")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail on the first undecodable file or empty class folder instead of skipping",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    args = parser.parse_args(argv)
    return run_cli(
        lambda: convert(
            args.src,
            args.out,
            max_resolution=args.max_resolution or None,
            jpeg_quality=args.jpeg_quality,
            compress_probability=args.compress_probability,
            write_mode=args.write_mode,
            smart_threshold=args.smart_threshold,
            num_workers=args.workers,
            strict=args.strict,
            splits=tuple(s for s in args.splits.split(",") if s),
            progress=not args.no_progress,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
