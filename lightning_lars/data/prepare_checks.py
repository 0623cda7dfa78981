"""What ``prepare.convert`` checks before it reads an image: the writer's settings, and the output folder
(writable, temporaries of killed conversions removed, a warning for a split an earlier conversion left there).

Imports ``core`` and ``integrity``: these run before FFCV (numba, seconds) is imported.
"""

import os
import sys

from lightning_lars.core.errors import UserError
from lightning_lars.data.integrity import MANIFEST_NAME

WRITE_MODES = ("proportion", "jpg", "raw", "smart")


def check_writable(out):
    """``out`` must be a folder we can write: a file, a read-only file system or a missing permission is one
    line naming the path, before any image is read."""
    if out.exists() and not out.is_dir():
        raise UserError(
            f"--out {out} is a file, not a folder: give a folder for train.beton, val.beton and"
            f" {MANIFEST_NAME}"
        )
    probe = out / f".write-test-{os.getpid()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
    except OSError as error:
        raise UserError(
            f"cannot write to --out {out} ({error.strerror or error}): choose a writable folder"
        ) from None
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass


def warn_about_older_splits(out, splits):
    """A .beton of a split not converted now stays from an earlier conversion: its classes may not match."""
    older = sorted(p.name for p in out.glob("*.beton") if p.name.removesuffix(".beton") not in splits)
    if older:
        print(
            f"warning: {out} keeps {', '.join(older)} from an earlier conversion (not rewritten with --splits"
            f" {','.join(splits)}); its classes may differ from the new files: delete it or convert it too",
            file=sys.stderr,
        )


def remove_stale_temporaries(out):
    """Delete ``*.tmp-<pid>`` files left in ``out`` by killed conversions whose process is gone."""
    for path in out.glob("*.tmp-*"):
        pid = path.name.rsplit("-", 1)[-1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except PermissionError:
            pass  # alive, owned by someone else


def validate_settings(settings: dict, *, num_workers: int, splits, page_size: int) -> None:
    """The writer's ``settings`` (``prepare.convert``'s, as the manifest records them), its process count, the
    splits and the FFCV page size (bytes): each mistake one `UserError` line naming the allowed values."""
    max_resolution, jpeg_quality = settings["max_resolution"], settings["jpeg_quality"]
    compress_probability, write_mode = settings["compress_probability"], settings["write_mode"]
    smart_threshold = settings["smart_threshold"]
    if write_mode not in WRITE_MODES:
        raise UserError(f"write_mode must be one of {', '.join(WRITE_MODES)}, got {write_mode!r}")
    if max_resolution is not None and max_resolution < 8:
        raise UserError(
            f"max_resolution must be >= 8 pixels (ffcv-imagenet uses 256-512), got {max_resolution}"
        )
    if not 1 <= jpeg_quality <= 100:
        raise UserError(f"jpeg_quality must be in 1..100, got {jpeg_quality}")
    if compress_probability is not None:
        if not 0.0 <= compress_probability <= 1.0:
            raise UserError(f"compress_probability must be in 0..1, got {compress_probability}")
        if write_mode != "proportion":
            print(
                f"warning: compress_probability has no effect with write_mode={write_mode!r}", file=sys.stderr
            )
    if write_mode == "smart" and smart_threshold is None:
        raise UserError(
            "write_mode 'smart' needs smart_threshold (bytes of raw RGB above which to store JPEG)"
        )
    if num_workers < 1:
        raise UserError(f"num_workers must be >= 1, got {num_workers}")
    if page_size < (1 << 21) or page_size & (page_size - 1):
        raise UserError(f"page_size must be a power of two >= 2 MiB (2097152), got {page_size}")
    if "train" not in splits:
        raise UserError("splits must include 'train' (it defines the class list)")
