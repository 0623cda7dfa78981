"""List and validate an ImageFolder tree (``<src>/<split>/<class>/<image>``, ImageNet's layout).

Rules (documented in ``python -m lightning_lars.data.prepare --help``):
- Classes are the sorted subfolder names of ``train/``; every split uses that list, so label ``i`` means
  the same class in every split. A ``val`` class missing from ``train`` is an error.
- Every regular, non-hidden file inside a class folder is a candidate, whatever its extension; a file PIL
  cannot fully decode (corrupt, truncated, not an image) is skipped and reported. Hidden files (``.DS_Store``)
  are ignored. Files lying directly in a split folder, outside any class folder, are skipped and reported.
- An empty class folder keeps its label index (labels stay stable) and is reported as a warning.
- Entries of a class folder that are not used are listed with the reason: symlinks that lead nowhere or loop,
  and folders nested inside a class folder (only one level is read).
"""

import contextlib
import ctypes
import errno
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from lightning_lars.core.errors import UserError

EXPECTED_LAYOUT = "expected <src>/train/<class>/<image> (and <src>/val/<class>/<image>), ImageNet's layout"


@dataclass
class SplitListing:
    """The files of one split: ``samples`` are ``(path, label)`` pairs in sorted order."""

    name: str
    samples: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (path, reason) pairs
    empty_classes: list = field(default_factory=list)


def _visible_entries(folder):
    return sorted(
        (entry for entry in os.scandir(folder) if not entry.name.startswith(".")), key=lambda e: e.name
    )


def list_classes(src):
    """Sorted class folder names under ``src/train``; UserError when the tree is not an ImageFolder."""
    src = Path(src)
    if not src.is_dir():
        raise UserError(f"source folder {src} does not exist; {EXPECTED_LAYOUT}")
    train_dir = src / "train"
    if not train_dir.is_dir():
        raise UserError(f"no train/ folder in {src}; {EXPECTED_LAYOUT}")
    classes = [entry.name for entry in _visible_entries(train_dir) if entry.is_dir()]
    if not classes:
        raise UserError(f"no class folders in {train_dir}; {EXPECTED_LAYOUT}")
    return classes


def list_split(src, split, classes):
    """All candidate files of ``src/split`` labelled by ``classes`` (the train class list)."""
    split_dir = Path(src) / split
    if not split_dir.is_dir():
        raise UserError(f"no {split}/ folder in {src}; {EXPECTED_LAYOUT} (or pass --splits to choose splits)")
    label_of = {name: index for index, name in enumerate(classes)}
    listing = SplitListing(split)
    entries = _visible_entries(split_dir)
    unknown = [entry.name for entry in entries if entry.is_dir() and entry.name not in label_of]
    if unknown:
        raise UserError(
            f"{split}/ has class folders missing from train/: {', '.join(unknown[:5])}"
            f"{' ...' if len(unknown) > 5 else ''}; every split must use train's classes"
        )
    listing.skipped += [(entry.path, "not inside a class folder") for entry in entries if entry.is_file()]
    present = {entry.name for entry in entries if entry.is_dir()}
    for name in classes:
        files = []
        for entry in _visible_entries(split_dir / name) if name in present else []:
            reason = _unusable(entry)
            if reason:
                listing.skipped.append((entry.path, reason))
            else:
                files.append(entry.path)
        if not files:
            listing.empty_classes.append(name)
        listing.samples += [(path, label_of[name]) for path in files]
    return listing


def _unusable(entry):
    """Why a class folder entry cannot be an image file, or None if it is a (link to a) regular file."""
    try:
        os.stat(entry.path)  # follows symlinks
    except OSError as error:
        if entry.is_symlink():
            return (
                "symlink loop"
                if error.errno == errno.ELOOP
                else f"symlink leads nowhere ({os.readlink(entry.path)})"
            )
        return f"cannot stat: {error.strerror}"
    if os.path.isdir(entry.path):
        return "folder inside a class folder: only files directly in <split>/<class>/ are read"
    if not os.path.isfile(entry.path):
        return "not a regular file"
    return None


def load_rgb(path, max_resolution=None):
    """Decode ``path`` fully into an RGB uint8 array (H, W, 3); raises on any decode problem.

    With ``max_resolution``, JPEGs are decoded by libjpeg's DCT scaling at the smallest power-of-two
    reduction that keeps the longer side >= ``max_resolution`` (several times faster for ImageNet-sized
    files; FFCV's writer then resizes exactly with INTER_AREA).
    """
    with Image.open(path) as image:
        if max_resolution is not None and image.format == "JPEG":
            ratio = max_resolution / max(image.size)
            if ratio < 1:
                image.draft("RGB", (math.ceil(image.size[0] * ratio), math.ceil(image.size[1] * ratio)))
        # convert() forces a full decode: truncated files raise here, not later in a writer process.
        return np.asarray(image.convert("RGB"))


def check_image(path):
    """``(None, (height, width))`` when ``path`` decodes fully, else ``(reason, None)`` (the decoder's message).

    JPEGs are checked at 1/8 scale: libjpeg still entropy-decodes the whole stream (so truncation and
    corruption are caught) but skips most of the inverse DCT and colour conversion.
    """
    try:
        with Image.open(path) as image:
            width, height = image.size
            if image.format == "JPEG":
                image.draft("RGB", (1, 1))  # the largest DCT reduction libjpeg offers (1/8)
            pixels = np.asarray(image.convert("RGB"))  # convert() forces the full decode
    except Exception as error:  # noqa: BLE001 -- PIL raises many types (OSError, SyntaxError, ValueError...)
        return f"{type(error).__name__}: {error}".splitlines()[0][:200], None
    if pixels.ndim != 3 or min(pixels.shape[:2]) == 0:
        return f"unexpected decoded shape {pixels.shape}", None
    return None, (height, width)


@contextlib.contextmanager
def children_ignore_sigint():
    """Processes forked inside ignore Ctrl-C: the parent gets KeyboardInterrupt and terminates them,
    instead of every worker printing its own traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be changed from the main thread
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent():
    """In a worker process: the kernel sends SIGKILL when the parent dies (``kill -9`` of ``prepare`` leaves no
    orphan holding ~0.5 GB). Linux only (prctl); elsewhere a no-op. Pool initializer / first call of a worker."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


class LineProgress:
    """tqdm's ``update``/``n`` interface as plain lines (at most one per 10 % and per 5 s) for logs that are not
    a terminal: tqdm's carriage-return redraws would fill a log file with one huge line."""

    def __init__(self, total, desc, unit="img", stream=None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, 0
        self.stream = stream or sys.stderr
        self._started = self._printed_at = time.perf_counter()
        self._printed_n = 0

    def update(self, count=1):
        self.n += count
        now = time.perf_counter()
        tenth = max(1, self.total // 10)
        if (self.n - self._printed_n >= tenth and now - self._printed_at >= 5) or self.n == self.total:
            self._printed_n, self._printed_at = self.n, now
            rate = self.n / max(now - self._started, 1e-9)
            print(
                f"{self.desc}: {self.n}/{self.total} {self.unit} ({100 * self.n / max(self.total, 1):.0f} %,"
                f" {rate:,.0f} {self.unit}/s)",
                file=self.stream,
                flush=True,
            )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def progress_bar(total, desc, enabled=True, unit="img"):
    """tqdm on a terminal, `LineProgress` in a log file, nothing when ``enabled`` is False."""
    if enabled and not sys.stderr.isatty():
        return LineProgress(total, desc, unit)
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled)


def check_split(listing, num_workers, strict, progress):
    """Decode every file of ``listing`` once in parallel; move undecodable ones to ``listing.skipped``
    (or, with ``strict``, raise a UserError naming the first). Returns the largest (height, width) seen."""
    paths = [path for path, _ in listing.samples]
    good, largest = [], (0, 0)
    with children_ignore_sigint():
        pool = multiprocessing.Pool(num_workers, initializer=die_with_parent)
    with pool, progress_bar(len(paths), f"check {listing.name}", progress) as bar:
        results = pool.imap(check_image, paths, chunksize=16)
        for sample, (reason, shape) in zip(listing.samples, results):
            bar.update(1)
            if reason is None:
                good.append(sample)
                largest = max(largest, shape, key=lambda hw: hw[0] * hw[1])
            elif strict:
                raise UserError(f"cannot decode {sample[0]} ({reason}); fix or remove it, or drop --strict")
            else:
                listing.skipped.append((sample[0], reason))
    listing.samples = good
    return largest
