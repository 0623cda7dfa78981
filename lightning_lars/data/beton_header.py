"""The fixed header of an FFCV ``.beton`` file, read without importing FFCV (whose import takes ~10 s).

Layout as ``ffcv.types`` 1.0 defines it (a unit test compares the two): a 24-byte header ``version``,
``num_fields``, ``page_size``, ``num_samples``, ``alloc_table_ptr``; the allocation table (24 bytes per
entry: ``sample_id``, ``ptr``, ``size``) closes the file. Used by the start-up checks, so that a missing or
damaged dataset is reported before the heavy stack loads.
"""

from __future__ import annotations

import os

import numpy as np

from lightning_lars.core.errors import UserError

CURRENT_VERSION = 2  # ffcv.types.CURRENT_VERSION of FFCV 1.0
HEADER_TYPE = np.dtype(
    [
        ("version", "<u2"),
        ("num_fields", "<u2"),
        ("page_size", "<u4"),
        ("num_samples", "<u8"),
        ("alloc_table_ptr", "<u8"),
    ],
    align=True,
)
ALLOC_TABLE_TYPE = np.dtype([("sample_id", "<u8"), ("ptr", "<u8"), ("size", "<u8")])


def read_num_samples(path: str, prepare_command: str) -> int:
    """Number of samples in a .beton, from its 24-byte header; a missing or damaged file is a ``UserError``."""
    if not os.path.isfile(path):
        raise UserError(f"dataset file {path} not found: prepare it with {prepare_command}")
    size = os.path.getsize(path)
    header = np.fromfile(path, dtype=HEADER_TYPE, count=1)
    damaged = UserError(
        f"dataset file {path} is truncated or not an FFCV file: prepare it again with {prepare_command}"
    )
    if len(header) != 1 or int(header[0]["version"]) != CURRENT_VERSION:
        raise damaged
    table_bytes = size - int(header[0]["alloc_table_ptr"])  # the allocation table closes the file
    if table_bytes < 0 or table_bytes % ALLOC_TABLE_TYPE.itemsize:
        raise damaged
    return int(header[0]["num_samples"])
