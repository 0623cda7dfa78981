"""Content checksums of a prepared dataset's ``.beton`` files: recorded in ``manifest.json`` when the files are
written, checked cheaply at every run start and in full by ``make verify``.

A file is cut into fixed regions of `REGION_BYTES`; the manifest keeps each region's CRC-32 and the file's size
(``{"checksums": {"algorithm": "crc32", "region_bytes": ..., "files": {"train.beton": {"bytes": ..., "regions":
[hex, ...]}}}}``). Damage of the same size (a bad disk block, a torn copy) changes a region's CRC where a size or
header check sees nothing. Regions, not samples: the check reads the file front to back at disk speed without
FFCV (no numba import, no metadata parse), and a region names the bytes to look at.

Cost, measured on this project's 2-core AMD EPYC (zlib.crc32 of Python 3.11, one core): 3.3 GiB/s, against
blake2b 0.5 and sha256 1.25 GiB/s. ImageNet at ffcv-imagenet's settings (~140 GB of .beton) is ~17,000 regions
(a ~0.3 MB list in the manifest) and ~40 s of CPU for a full check, so a full check runs at the disk's speed
(1-2 minutes on an NVMe drive, more on a network file system): that is ``make verify``. A run's start checks
every file's size, the file's head (header, field descriptors and sample metadata, which hold the labels) and
tail (the allocation table) in full, and `START_SAMPLE_BYTES` of data regions drawn at random; data sets up to
that size (the demo) are checked whole, and so is a file whose modification time changed since its checksums
were recorded (a stray write; a copy that did not keep the time: ``cp -p`` and ``rsync -a`` keep it). Damage that
leaves the time alone (a failing disk) is found by the sample at start with the probability of the share read,
and always by ``make verify``. Checking each sample as the loader reads it is left out: in random order a run's
first steps touch nearly every region, so that would be a full read before training anyway.
"""

from __future__ import annotations

import json
import os
import random
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightning_lars.core.errors import UserError
from lightning_lars.data.beton_header import ALLOC_TABLE_TYPE, HEADER_TYPE

MANIFEST_NAME = "manifest.json"
ALGORITHM = "crc32"
REGION_BYTES = 1 << 23  # 8 MiB: FFCV's page for large data sets
START_SAMPLE_BYTES = 1 << 28  # 256 MiB of data regions per run start: ~0.1 s of CRC, one read at disk speed
READ_BYTES = 1 << 20  # bytes read at a time within a region


@dataclass(frozen=True)
class Damage:
    """A file whose size or region checksums differ from those recorded when it was written."""

    path: Path
    detail: str  # "1 of 3 regions checked (8 MiB each) changed, within bytes ...", "42 bytes instead of 43"

    def line(self, rebuild: str) -> str:
        return (
            f"dataset file {self.path} is damaged: {self.detail} since it was written (checksums in"
            f" {self.path.parent / MANIFEST_NAME}); rebuild it with {rebuild}"
        )


def region_crc(handle, start: int, length: int) -> int:
    handle.seek(start)
    crc, left = 0, length
    while left > 0:
        chunk = handle.read(min(READ_BYTES, left))
        if not chunk:
            break
        crc = zlib.crc32(chunk, crc)
        left -= len(chunk)
    return crc


def file_checksums(path: Path, region_bytes: int = REGION_BYTES) -> dict:
    """``{"bytes": size, "mtime_ns": modified, "regions": [crc32 hex of each region]}`` of ``path``, read once
    front to back."""
    stat = os.stat(path)
    with open(path, "rb") as handle:
        regions = [
            f"{region_crc(handle, start, region_bytes):08x}" for start in range(0, stat.st_size, region_bytes)
        ]
    return {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "regions": regions}


def checksums_entry(folder: Path, names: list[str], region_bytes: int = REGION_BYTES) -> dict:
    """The manifest's ``checksums`` value for the files ``names`` in ``folder``."""
    files = {name: file_checksums(Path(folder) / name, region_bytes) for name in names}
    return {"algorithm": ALGORITHM, "region_bytes": region_bytes, "files": files}


def read_manifest(folder: Path) -> dict | None:
    try:
        manifest = json.loads((Path(folder) / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def recorded(manifest: dict | None, name: str) -> tuple[int, dict] | None:
    """``(region_bytes, {"bytes", "regions"})`` recorded for the file ``name``, or None (an older manifest)."""
    checksums = (manifest or {}).get("checksums")
    if not isinstance(checksums, dict) or checksums.get("algorithm") != ALGORITHM:
        return None
    entry = (checksums.get("files") or {}).get(name)
    if not isinstance(entry, dict) or not isinstance(entry.get("regions"), list):
        return None
    return int(checksums["region_bytes"]), entry


def structure_regions(path: Path, size: int, region_bytes: int) -> set[int]:
    """Indices of the regions before the first data page (header, field descriptors, the sample metadata that
    holds the labels) and from the allocation table on: damage there misleads every sample, so a run start
    checks them whole. Read from the header and the allocation table, without FFCV."""
    header = np.fromfile(path, dtype=HEADER_TYPE, count=1)
    last = (size - 1) // region_bytes
    if len(header) != 1 or not 0 < int(header[0]["alloc_table_ptr"]) <= size:
        return set(range(last + 1))  # a damaged header: everything is suspect, read it all
    table_start = int(header[0]["alloc_table_ptr"])
    table = np.fromfile(path, dtype=ALLOC_TABLE_TYPE, offset=table_start)
    data_start = int(table["ptr"].min()) if len(table) else table_start
    head = set(range(0, min(data_start, size) // region_bytes + 1))
    return head | set(range(table_start // region_bytes, last + 1))


def check_file(
    path: Path, region_bytes: int, entry: dict, sample_bytes: int | None = None, seed: int | None = None
) -> Damage | None:
    """``path`` against its recorded size and region checksums: every region (``sample_bytes`` None), or the
    file's structure (`structure_regions`) plus data regions worth ``sample_bytes``, drawn with ``seed``."""
    path = Path(path)
    size, expected = os.path.getsize(path), entry["regions"]
    if size != entry["bytes"]:
        return Damage(path, f"{size:,} bytes instead of {entry['bytes']:,}")
    indices = list(range(len(expected)))
    if sample_bytes is not None and len(expected) * region_bytes > sample_bytes:
        must = structure_regions(path, size, region_bytes)
        rest = [i for i in indices if i not in must]
        drawn = random.Random(seed).sample(rest, k=min(len(rest), sample_bytes // region_bytes))
        indices = sorted(must | set(drawn))
    changed = []
    with open(path, "rb") as handle:
        for index in indices:
            start = index * region_bytes
            if f"{region_crc(handle, start, region_bytes):08x}" != expected[index]:
                changed.append(index)
    if not changed:
        return None
    first, last = changed[0] * region_bytes, min((changed[-1] + 1) * region_bytes, size) - 1
    regions = f"{len(changed)} of {len(indices)} regions checked ({region_bytes / 2**20:g} MiB each)"
    return Damage(path, f"{regions} changed, within bytes {first:,}-{last:,},")


def start_check(
    paths: list[Path], rebuild: dict[Path, str], sample_bytes: int = START_SAMPLE_BYTES
) -> list[str]:
    """A run start's check of the ``.beton`` files ``paths`` (each folder's ``manifest.json``): damage is a
    one-line `UserError` naming the file and ``rebuild[path]``. A file written to since its checksums were
    recorded (its modification time differs: a stray write, a copy without ``-p``) is checked whole, with a note
    line; a file as it was, by `check_file`'s sample. Returns the lines to print: those notes, and one warning per
    folder whose manifest records no checksums of some of them (written before they were), saying how to add
    them. A file without a manifest (made elsewhere) is not checked."""
    unchecked: dict[Path, list[Path]] = {}
    notes = []
    for path in map(Path, paths):
        manifest = read_manifest(path.parent)
        if manifest is None:
            continue
        found = recorded(manifest, path.name)
        if found is None:
            unchecked.setdefault(path.parent, []).append(path)
            continue
        touched = found[1].get("mtime_ns") != os.stat(path).st_mtime_ns
        started = time.perf_counter()
        damage = check_file(path, *found, sample_bytes=None if touched else sample_bytes)
        if damage is not None:
            raise UserError(damage.line(rebuild[path]))
        if touched and found[1]["bytes"] > sample_bytes:
            notes.append(
                f"note: {path} was written to since its checksums were recorded (its modification time), so it"
                f" was checked whole ({found[1]['bytes'] / 2**30:.1f} GiB in {time.perf_counter() - started:.0f} s):"
                f" intact; make verify dir={path.parent} args=--record notes that, for a quick start next time"
            )
    return notes + [
        unchecked_warning(folder, [p.name for p in files], rebuild[files[0]])
        for folder, files in unchecked.items()
    ]


def unchecked_warning(folder: Path, names: list[str], rebuild: str) -> str:
    return (
        f"warning: {folder / MANIFEST_NAME} records no checksums of {', '.join(names)} (written before they were):"
        f" damage would go unnoticed; record them with make verify dir={folder} args=--record (trusting the"
        f" files as they are now), or rebuild with {rebuild}"
    )
