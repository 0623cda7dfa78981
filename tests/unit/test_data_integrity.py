"""The region checksums a .beton's manifest records, and what a run start's cheap check reads of them.

The oracle for a region's checksum is ``binascii.crc32`` of that slice of the file (the CRC-32 of ISO-HDLC,
as zip and PNG use it); the file layout is FFCV 1.0's (header, then data, the allocation table last), written
here with FFCV's own record types (``ffcv.types``)."""

from __future__ import annotations

import binascii
import json
import os

import numpy as np
import pytest
from ffcv.types import ALLOC_TABLE_TYPE, HeaderType

from lightning_lars.core.errors import UserError
from lightning_lars.data import integrity

REGION = 1 << 16  # bytes: small regions, so a file of a few hundred KiB has many


def beton_like(path, num_regions=12, head_regions=2, table_entries=8):
    """A file laid out as an FFCV .beton: a header and metadata over the first ``head_regions`` regions, data
    pages after them, the allocation table (pointing into the data) closing the file."""
    rng = np.random.default_rng(0)
    data_start = head_regions * REGION
    table_start = (num_regions - 1) * REGION + 100
    body = bytearray(rng.integers(0, 256, size=table_start, dtype=np.uint8).tobytes())
    header = np.zeros(1, dtype=HeaderType)
    header[0] = (2, 2, 1 << 21, table_entries, table_start)
    body[: HeaderType.itemsize] = header.tobytes()
    table = np.zeros(table_entries, dtype=ALLOC_TABLE_TYPE)
    table["sample_id"] = np.arange(table_entries)
    table["ptr"] = data_start + np.arange(table_entries) * 1000
    table["size"] = 1000
    path.write_bytes(bytes(body) + table.tobytes())
    return path


def flip_byte(path, offset):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def test_each_regions_checksum_is_the_crc32_of_its_bytes(tmp_path):
    path = beton_like(tmp_path / "train.beton")
    recorded = integrity.file_checksums(path, REGION)
    content = path.read_bytes()
    assert recorded["bytes"] == len(content) == os.path.getsize(path)
    want = [f"{binascii.crc32(content[i : i + REGION]):08x}" for i in range(0, len(content), REGION)]
    assert recorded["regions"] == want and len(want) == 12  # the last region is the file's short tail


def test_a_full_check_finds_one_changed_byte_anywhere_and_names_its_region(tmp_path):
    path = beton_like(tmp_path / "train.beton")
    entry = integrity.file_checksums(path, REGION)
    assert integrity.check_file(path, REGION, entry) is None
    flip_byte(path, 7 * REGION + 5)
    damage = integrity.check_file(path, REGION, entry)
    assert damage is not None and f"within bytes {7 * REGION:,}-{8 * REGION - 1:,}" in damage.detail


def test_the_start_check_reads_the_head_and_the_table_whole_and_samples_the_data(tmp_path):
    path = beton_like(tmp_path / "train.beton")
    entry = integrity.file_checksums(path, REGION)
    # the metadata (labels) and the allocation table: checked even with no budget for data regions
    for offset in (REGION + 10, os.path.getsize(path) - 3):
        flip_byte(path, offset)
        assert integrity.check_file(path, REGION, entry, sample_bytes=0) is not None
        flip_byte(path, offset)  # back as it was
    flip_byte(path, 5 * REGION)  # a data region: found when drawn, always by a full check
    assert integrity.check_file(path, REGION, entry, sample_bytes=0) is None
    assert integrity.check_file(path, REGION, entry, sample_bytes=12 * REGION) is not None
    assert integrity.check_file(path, REGION, entry) is not None
    drawn = [integrity.check_file(path, REGION, entry, sample_bytes=3 * REGION, seed=s) for s in range(40)]
    assert 0 < sum(d is not None for d in drawn) < 40  # 3 of the 9 data regions a draw: found about 1 in 3


def test_same_size_is_required_and_an_older_manifest_only_warns(tmp_path):
    path = beton_like(tmp_path / "train.beton")
    manifest = {"checksums": integrity.checksums_entry(tmp_path, ["train.beton"], REGION)}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    rebuild = {path: "make demo-data out=X"}
    assert integrity.start_check([path], rebuild) == []
    with open(path, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(
        UserError, match=r"is damaged: .* bytes instead of .*rebuild it with make demo-data out=X"
    ):
        integrity.start_check([path], rebuild)
    (tmp_path / "manifest.json").write_text("{}")  # a manifest from before checksums
    (warning,) = integrity.start_check([path], rebuild)
    assert f"make verify dir={tmp_path} args=--record" in warning and warning.startswith("warning: ")


def test_a_file_written_to_since_its_checksums_is_checked_whole_at_the_start(tmp_path):
    path = beton_like(tmp_path / "train.beton")
    manifest = {"checksums": integrity.checksums_entry(tmp_path, ["train.beton"], REGION)}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    written = os.stat(path).st_mtime_ns
    flip_byte(path, 6 * REGION)  # a data region, which no sample reads with sample_bytes=0
    rebuild = {path: "make prepare src=S out=X"}
    os.utime(path, ns=(written, written))  # as a failing disk leaves it: the time it was written
    assert integrity.start_check([path], rebuild, sample_bytes=0) == []
    os.utime(path, ns=(written + 10**9, written + 10**9))  # as a write leaves it
    with pytest.raises(UserError, match=r"within bytes 393,216-458,751, since it was written"):
        integrity.start_check([path], rebuild, sample_bytes=0)
    flip_byte(path, 6 * REGION)  # repaired, but not as it was recorded: checked whole, and said so
    (note,) = integrity.start_check([path], rebuild, sample_bytes=0)
    assert (
        note.startswith(f"note: {path} was written to")
        and f"make verify dir={tmp_path} args=--record" in note
    )
