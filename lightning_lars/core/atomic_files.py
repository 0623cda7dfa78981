"""Small files written whole or not at all: a reader (a resumed run, `make demo-data`, `make prepare`) never sees
half a manifest or config, and a failed write leaves the older file in place."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` to ``<path>.tmp-<pid>`` beside ``path``, then rename it over ``path`` (atomic on POSIX);
    the temporary file is removed if anything fails."""
    tmp = Path(f"{path}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path | str, payload: object) -> None:
    """``payload`` as indented JSON (a manifest, the demo's parameters), written as `write_text_atomic` writes."""
    write_text_atomic(path, json.dumps(payload, indent=2) + "\n")
