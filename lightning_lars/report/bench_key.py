"""What names one run of ``benchmarks/bench_largebatch.py``: its data set (by name and content hash, never a folder
of the machine), the factors of its set-up, the arm and the seed. The runs file's resume and the report's
grouping both read rows through here, so a row written before a factor existed reads as that factor's default.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

BENCH_KIND = "bench-largebatch"
BASELINE_ARM = "sgd_small"
BETONS = ("train.beton", "val.beton")  # what a run reads from a data folder made by `make prepare`
HASH_CHARS = 16  # hex characters of sha256 kept: 64 bits, no collision among a project's data sets
# The set-up of the runs before these factors were recorded (README, "Runs of ours"): their defaults.
DEFAULT_WIDTH = "quarter"
DEFAULT_LR_RULE = "linear"
# A row the fair report read at its arm's chosen LR scale carries it under this factor (report/verdict_rows.py)
TUNED_SCALE = "tuned_lr_scale"


class RunKey(NamedTuple):
    arm: str
    dataset: str  # the data set's name (its folder's last part)
    ratio: float  # large batch as a share of the training images
    epochs: int
    resolution: int  # px
    seed: int
    # sha256 of the .beton files' samples (data_hash below), shortened; "" for rows written before it was recorded
    data_hash: str = ""
    width: str = DEFAULT_WIDTH  # resnet10t at a quarter of its widths or at full width
    lr_rule: str = DEFAULT_LR_RULE  # how the recipe's LR moves to the large batch
    holdout: float = (
        0.0  # share of the training images held out and evaluated (tuning); 0: val.beton evaluated
    )
    lr_scale: float = 1.0  # the rule's LR times this (a tuning trial's multiplier)


def data_hash(folder: Path) -> str:
    """sha256 over what the .beton files hold, in a fixed order: the same data set wherever the folder travels,
    and whichever way FFCV's writer processes laid it out (``beton_content``)."""
    digest = hashlib.sha256()
    for name in BETONS:
        digest.update(name.encode() + b"\0")
        beton_content(Path(folder) / name, digest)
    return digest.hexdigest()[:HASH_CHARS]


def beton_content(path: Path, digest) -> None:
    """Feed ``digest`` a .beton's samples in index order: each field's metadata (an image's mode, width and
    height; a label) and the bytes each pointer field stores (the JPEG or raw pixels), without the pointers,
    the pages or the padding. FFCV's writer processes take pages in the order they finish, so two conversions
    of the same images differ byte for byte; this reads the same from both, and differs with any pixel or
    label."""
    from ffcv.reader import Reader  # FFCV imports numba: seconds, paid only where a data set is hashed

    reader = Reader(str(path))
    meta = reader.metadata
    blocks = np.sort(reader.alloc_table, order="ptr")
    stored = np.memmap(path, dtype=np.uint8, mode="r")
    digest.update(repr(reader.field_names).encode())
    pointers = []
    for field in meta.dtype.names:
        parts = meta.dtype[field].names or (None,)
        for part in parts:
            if part == "data_ptr":
                pointers.append(meta[field][part])
                continue
            column = meta[field] if part is None else meta[field][part]
            digest.update(
                f"{field}.{part}:{column.dtype.str}".encode() + np.ascontiguousarray(column).tobytes()
            )
    for column in pointers:
        where = np.minimum(np.searchsorted(blocks["ptr"], column), len(blocks) - 1)
        if not np.array_equal(blocks["ptr"][where], column):
            raise ValueError(f"{path}: a sample points outside the file's allocations (a damaged .beton)")
        for start, size in zip(column.tolist(), blocks["size"][where].tolist(), strict=True):
            digest.update(stored[start : start + size].tobytes())


def key_of(row: dict) -> RunKey | None:
    if row.get("kind") != BENCH_KIND:
        return None
    factors = row.get("factors", {})
    return RunKey(
        row["arm"],
        row["dataset"]["name"],
        row["ratio"],
        row["epochs"],
        row["resolution"],
        row["seed"],
        row["dataset"].get("sha256", ""),
        factors.get("width", DEFAULT_WIDTH),
        factors.get("lr_rule", DEFAULT_LR_RULE),
        factors.get("holdout", {}).get("share", 0.0),
        factors.get("lr_scale", 1.0),
    )


def baseline_part(key: RunKey) -> RunKey:
    """Small-batch SGD trains at its own batch and LR whatever the large batch: the ratio and the large-batch
    LR rule do not change it, so one baseline run serves every ratio and rule of its set-up."""
    return key._replace(ratio=None, lr_rule=None)


def same_run(row: dict, key: RunKey) -> bool:
    """Whether ``row`` is the run ``key`` names (small-batch SGD: of any ratio and large-batch LR rule)."""
    have = key_of(row)
    if have is None or key.arm != BASELINE_ARM:
        return have == key
    return baseline_part(have) == baseline_part(key)


def setup_of(key: RunKey) -> RunKey:
    """The set-up a run belongs to: its key without arm and seed."""
    return key._replace(arm="", seed=-1)


def setup_label(setup: RunKey) -> str:
    """The set-up in words; the factors at their old defaults are not named, so old rows read as before."""
    text = f"{setup.dataset}, ratio {setup.ratio:g}, {setup.epochs} epochs, {setup.resolution} px"
    text += "" if setup.width == DEFAULT_WIDTH else f", {setup.width} width"
    text += "" if setup.lr_rule == DEFAULT_LR_RULE else f", {setup.lr_rule} LR rule"
    text += "" if setup.lr_scale == 1.0 else f", LR x{setup.lr_scale:g}"
    return text + (
        "" if not setup.holdout else f", {100 * setup.holdout:g} % of train held out and evaluated"
    )
