"""The GPU kit (``make gpu-kit``): every wheel a GPU node that already has CUDA torch, torchvision, lightning, timm
and torchmetrics still needs, plus this package's own and FFCV's (built here with its libraries inside:
benchmarks/ffcv_wheel.py), in one folder that fits beside the working tree in the 64 MiB a job may carry.

    make gpu-kit [python=3.12 platform=manylinux_2_28_x86_64 out=gpu-kit]   # or: python benchmarks/gpu_kit.py ...
    # on the node, from the clone's root: make gpu-check   (benchmarks/gpu_check.py)

Unlike ``make wheelhouse without=torch`` it also leaves out what those packages bring (numpy and pillow come
with torchvision): a node with them has them. If the folder still exceeds the limit, wandb (the largest wheel,
about 20 MiB) is left out and recorded in ``kit.json``; benchmarks/gpu_check.py runs with ``~logger`` either way.
A packaging tool that runs from a clone, so it lives beside the job it feeds, outside the shipped package: in
benchmarks/ with wheelhouse.py, ffcv_wheel.py and the gpu_check scripts, as the project's top level is fixed
(no tools/ folder).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from ffcv_wheel import FFCV_NEEDS, build_ffcv_wheel  # benchmarks/ffcv_wheel.py, beside this script
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from wheel_requirements import GROUPS, installed_closure, project_requirements  # beside this script
from wheelhouse import download, project_wheel, this_machine  # benchmarks/wheelhouse.py, beside this script

from lightning_lars.core.errors import UserError

LIMIT_MIB = 64  # what a job may carry to the node, the working tree included
ROOT = Path(__file__).resolve().parents[1]
# the node's image (torch & co.; numba, llvmlite, OpenCV); FFCV's own wheel is built apart (ffcv_wheel.py)
WITHOUT = {"torch", "ffcv"}
DROPPED_FIRST = "wandb"  # its runs log nothing there (~logger); only a W&B run of test-gpu needs it
MANIFEST = "kit.json"
# pyproject's build-system; 70.1: bdist_wheel built in (no `wheel` package)
BUILD_BACKEND = "setuptools>=70.1"


def wheels_of(folder: Path, names: set[str]) -> list[Path]:
    """The wheels in ``folder`` of the distributions ``names`` (canonical names)."""
    return [w for w in folder.glob("*.whl") if canonicalize_name(w.name.split("-")[0]) in names]


def size_mib(folder: Path) -> float:
    return sum(wheel.stat().st_size for wheel in folder.glob("*.whl")) / 2**20


def tree_mib() -> float:
    """The working tree as a job carries it: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    files = [ROOT / name for name in listed.stdout.decode().split("\0") if name]
    return sum(f.stat().st_size for f in files if f.is_file()) / 2**20


def glibc_of(tag_or_wheel: str) -> str | None:
    """``2.35`` of ``manylinux_2_35_x86_64`` or of a wheel named with it; None for other tags."""
    found = re.search(r"manylinux_(\d+)_(\d+)_", tag_or_wheel)
    return f"{found.group(1)}.{found.group(2)}" if found else None


def build(out: Path, python: str | None, platform_tag: str | None) -> dict:
    """Fill ``out`` with the kit; returns what ``kit.json`` records."""
    for stale in out.glob("*.whl"):  # a kit from an older lock or target must not mix in
        stale.unlink()
    on_the_node = installed_closure(GROUPS["torch"])  # torch, ..., and what they need (numpy, pillow, ...)
    requirements = [
        r for r in project_requirements(WITHOUT) if canonicalize_name(Requirement(r).name) not in on_the_node
    ]
    python = python or this_machine()[0]
    download(requirements, out, python, platform_tag, WITHOUT)
    ffcv, ffcv_missing = build_ffcv_wheel(python, out)
    print(f"  FFCV: {ffcv.name if ffcv else ffcv_missing}", flush=True)
    if ffcv:
        download(list(FFCV_NEEDS), out, python, platform_tag, set())
    for present in wheels_of(out, on_the_node):  # a dependency of a kept package that the node has
        present.unlink()
    # the build backend of the clone's editable install, kept even where the node has one (so after the clean-up
    # above): pip builds in an isolated environment, which offline can take it only from the kit (about 1 MiB)
    download([BUILD_BACKEND], out, python, platform_tag, set())
    wheel = project_wheel(out)
    limit = LIMIT_MIB - tree_mib()
    left_out = []
    if size_mib(out) > limit:
        for dropped in wheels_of(out, {DROPPED_FIRST}):
            dropped.unlink()
        left_out.append(DROPPED_FIRST)
    if size_mib(out) > limit:
        raise UserError(
            f"the kit is {size_mib(out):.1f} MiB even without {DROPPED_FIRST}, over the {limit:.1f} MiB the"
            f" working tree leaves of {LIMIT_MIB}: list {out} by size and leave out what the node already has"
        )
    manifest = {
        "python": python,
        "platform": platform_tag or this_machine()[1],
        "project_wheel": wheel.name,
        "node_has": list(GROUPS["torch"]),  # requirements of the project that the installer leaves alone
        "left_out_for_size": left_out,
        "size_mib": round(size_mib(out), 1),
        "ffcv_wheel": ffcv.name if ffcv else None,
        # auditwheel tags FFCV's wheel with the oldest glibc its symbols allow, from this machine's libraries:
        # a node below it (RHEL 8: glibc 2.28) refuses that wheel however the rest of the kit is tagged
        "ffcv_needs_glibc": glibc_of(ffcv.name) if ffcv else None,
        "ffcv_missing": ffcv_missing,  # why the kit has no FFCV; the job's FFCV part says it
        "ffcv_needs": list(FFCV_NEEDS),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu_kit.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="gpu-kit", help="folder to fill (default: gpu-kit)")
    parser.add_argument("--python", default=None, help="the node's Python, e.g. 3.12 (default: this one)")
    parser.add_argument(
        "--platform",
        default=None,
        help="the node's platform tag, e.g. manylinux_2_28_x86_64 (default: this one)",
    )
    args = parser.parse_args(argv)
    try:
        if args.python is not None and not re.fullmatch(r"3\.\d+", args.python):
            raise UserError(f"--python takes a version like 3.12, got {args.python}")
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        manifest = build(out, args.python, args.platform)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    count = len(list(out.glob("*.whl")))
    dropped = manifest["left_out_for_size"]
    note = f"; left out for size: {', '.join(dropped)}" if dropped else ""
    note += f"; FFCV: {manifest['ffcv_wheel'] or 'none, ' + manifest['ffcv_missing']}"
    needs, target = manifest["ffcv_needs_glibc"], glibc_of(manifest["platform"])
    if needs and target and Version(needs) > Version(target):
        note += f" (needs glibc >= {needs}: pip refuses it on a node of glibc {target})"
    print(
        f"gpu kit {out}: {count} wheels, {manifest['size_mib']} MiB, Python {manifest['python']},"
        f" {manifest['platform']}{note}"
    )
    print(
        f"on the node, from the clone's root: make gpu-check kit={out} (python3 benchmarks/gpu_check.py --kit {out})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
