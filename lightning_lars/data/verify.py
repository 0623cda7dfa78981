"""Check a prepared dataset in full against the checksums its ``manifest.json`` recorded when it was written.

    python -m lightning_lars.data.verify data/imagenet            # make verify dir=data/imagenet
    python -m lightning_lars.data.verify data/imagenet --record   # add checksums to an older manifest

Reads every byte of every ``.beton`` the manifest lists (about 1-2 minutes per 140 GB on an NVMe drive:
`lightning_lars.data.integrity`). A damaged file: one line naming it and the command that rebuilds it, exit 2.
``--record`` adds the checksums a manifest written before they existed lacks, trusting the files as they are
now; files whose checksums are recorded already are checked instead, never re-recorded, and once intact their
modification time is noted, so that a run's start samples them again instead of reading them whole.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lightning_lars.core.atomic_files import write_json_atomic
from lightning_lars.core.errors import UserError
from lightning_lars.data import integrity
from lightning_lars.data.prepare import run_cli


def rebuild_command(folder: Path, manifest: dict) -> str:
    """The command that writes ``folder`` again: the demo's own, or `make prepare` from the recorded source."""
    if "demo" in manifest:
        return f"make demo-data out={folder}"
    return f"make prepare src={manifest.get('src', '<imagefolder>')} out={folder}"


def verify(folder: Path, record: bool = False) -> None:
    manifest = integrity.read_manifest(folder)
    if manifest is None:
        raise UserError(
            f"no readable {integrity.MANIFEST_NAME} in {folder}: give the folder `make prepare` or `make demo-data`"
            " wrote (it holds train.beton, val.beton and the manifest)"
        )
    rebuild = rebuild_command(folder, manifest)
    names = [f"{split}.beton" for split in manifest.get("splits", {})]
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder / missing[0]} not found: rebuild it with {rebuild}")
    unrecorded = [name for name in names if integrity.recorded(manifest, name) is None]
    for name in names:
        found = integrity.recorded(manifest, name)
        if found is None:
            continue
        started = time.perf_counter()
        damage = integrity.check_file(folder / name, *found)
        if damage is not None:
            raise UserError(damage.line(rebuild))
        seconds = time.perf_counter() - started
        mib, regions = found[1]["bytes"] / 2**20, len(found[1]["regions"])
        print(f"{folder / name}: intact ({mib:,.1f} MiB, {regions} regions, {seconds:.1f} s)")
        found[1]["mtime_ns"] = (folder / name).stat().st_mtime_ns  # intact as it is now: a quick start next
    if record:
        entry = manifest.get("checksums")
        if not isinstance(entry, dict) or entry.get("algorithm") != integrity.ALGORITHM:
            entry = {"algorithm": integrity.ALGORITHM, "region_bytes": integrity.REGION_BYTES, "files": {}}
        entry.setdefault("files", {})
        for name in unrecorded:
            entry["files"][name] = integrity.file_checksums(folder / name, entry["region_bytes"])
        manifest["checksums"] = entry
        write_json_atomic(folder / integrity.MANIFEST_NAME, manifest)
        done = (
            f"recorded the checksums of {', '.join(unrecorded)}"
            if unrecorded
            else "noted the files as checked"
        )
        print(f"{done} in {folder / integrity.MANIFEST_NAME}")
    elif unrecorded:
        print(integrity.unchecked_warning(folder, unrecorded, rebuild), file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lightning_lars.data.verify", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "folder", type=Path, help="the folder make prepare wrote (train.beton, manifest.json)"
    )
    parser.add_argument(
        "--record", action="store_true", help="add missing checksums to an older manifest (trusts the files)"
    )
    args = parser.parse_args(argv)
    return run_cli(lambda: verify(args.folder, args.record))


if __name__ == "__main__":
    sys.exit(main())
