"""One job for a GPU node (``make gpu-check``), at most 8 minutes with the kit's install: the GPU parts in order of
value, sharing that budget (``BUDGET_S``), each under its own limit (``LIMITS``), results in the repository under
``benchmarks/results/<date>-<device>/`` and packed into ``$OUT`` (benchmarks/gpu_results.py).

    make gpu-kit                                   # here, with internet: gpu-kit/ (wheels, FFCV's built here)
    make gpu-check [kit=gpu-kit|none] [out=DIR]    # there, from the clone's root, no internet
    python3 benchmarks/gpu_check.py [--kit gpu-kit|none] [--out DIR] [--results DIR] [--parts a,b,...]

Parts, most valuable first (one GPU's share of ``recipe=nvidia_mlperf10_3264``: 408 images, 224 px, 16-mixed,
LARS in its nvidia form, cuDNN's autotuner on, as the recipe runs; images/s after the first 20 steps):
    (a) the recipe compiled through the entry point, 100 timed steps; beside it benchmarks/bench_gpu.py's bare
        loop compiled at identical settings (batch, precision, LARS form, label smoothing, autotuner, steps).
    (b) generated 300-500 px JPEGs through the entry point, compiled: torchvision's CPU loader, FFCV (the
        kit's wheel; the JPEGs converted on the node), decoding on the GPU (``data.decode=device``) from the JPEG
        tree and from the same .beton files, each beside (a). A loader the config does not offer, or a package
        the node lacks, is reported "not available".
    (f) the optimizer steps (bench_gpu.py --only optimizer).  (g) the ``-m gpu`` tests, the no-read-back probe
        first.  (c) a step profile of the compiled recipe (benchmarks/profile_steps.py: forward, backward,
        optimizer, data, idle).  (d) bf16-mixed compiled, beside (a).  (e) 816 images per GPU compiled, beside (a).
    They run in that order: (f) and (g) answer goals of their own, (c)-(e) explain and compile new shapes.
Without CUDA each GPU part records why it skipped, so the whole job runs on a CPU (tests/integration).
``--kit none`` runs in this environment as it is. Stdlib only until the kit is installed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

from gpu_job_settings import (  # benchmarks/gpu_job_settings.py, beside this script
    INSTALL_HANG_S,
    LIMITS,
    ROOT,
)
from gpu_results import pack  # benchmarks/gpu_results.py, beside this script


def requirements_of(wheel: Path, left_out: list[str]) -> list[str]:
    """The wheel's declared requirements (no extras, markers kept), less ``left_out``."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    declared = [line.partition(": ")[2] for line in lines if line.startswith("Requires-Dist: ")]
    return [
        r
        for r in declared
        if "extra ==" not in r and re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() not in left_out
    ]


def pip(arguments: list[str], log) -> None:
    command = [sys.executable, "-m", "pip", "install", "--no-index", *arguments]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=INSTALL_HANG_S)
    except subprocess.TimeoutExpired as error:
        log.write(f"{error}\n")
        sys.exit(
            f"error: pip install --no-index did not finish in {INSTALL_HANG_S} s: {' '.join(arguments[-2:])}"
        )
    log.write(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"error: pip install --no-index failed ({tail[0]}); the whole output is in {log.name}")


def install(kit: Path, log_path: Path) -> dict:
    """The project's dependencies, pytest and FFCV from the kit where the node lacks them (its torch, ... stay),
    then this clone editable: the code that runs is the clone's. Returns the kit's manifest."""
    manifest = kit / "kit.json"
    if not manifest.is_file():
        sys.exit(
            f"error: {kit} is no GPU kit (no kit.json): make it with `make gpu-kit` on a machine with internet"
        )
    kit_info = json.loads(manifest.read_text())
    with log_path.open("w") as log:
        left_out = [*kit_info["left_out_for_size"], *kit_info["node_has"]]
        wanted = requirements_of(kit / kit_info["project_wheel"], left_out)
        pip(["--find-links", str(kit), *wanted, "pytest"], log)
        if kit_info.get("ffcv_wheel"):  # its opencv-python requirement is met by the node's headless OpenCV
            pip(["--find-links", str(kit), "--no-deps", str(kit / kit_info["ffcv_wheel"])], log)
            pip(["--find-links", str(kit), *kit_info["ffcv_needs"]], log)
        # built in pip's isolated environment with the kit's setuptools (the node's may be older or absent)
        pip(["--find-links", str(kit), "--no-deps", "--editable", str(ROOT)], log)
    print(f"installed the kit {kit} and this clone (editable) into {sys.prefix}", flush=True)
    return kit_info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kit", default=str(ROOT / "gpu-kit"), help="the folder make gpu-kit wrote, or none")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out", help="where the pack goes")
    parser.add_argument("--results", help="the results folder (default: benchmarks/results/<date>-<device>)")
    parser.add_argument("--parts", help=f"only these, comma-separated, of: {', '.join(LIMITS)}")
    args = parser.parse_args(argv)
    wanted = set(args.parts.split(",")) if args.parts else set(LIMITS)
    if wanted - set(LIMITS):
        parser.error(f"--parts takes {', '.join(LIMITS)}; got {', '.join(sorted(wanted - set(LIMITS)))}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:  # run folders and images: only the numbers come back
        work = Path(tmp)
        kit_info = {}
        if args.kit != "none":
            kit_info = install(Path(args.kit).resolve(), work / "install.log")
            # the editable install's .pth is read at interpreter start-up: read it now, for the imports below
            site.addsitedir(sysconfig.get_paths()["purelib"])
            importlib.invalidate_caches()
        from gpu_check_parts import run_parts  # imports torch: after the install

        folder = run_parts(args, wanted, kit_info, work, started)
    files = pack(folder, Path(args.out).resolve())
    print((folder / "summary.md").read_text(), flush=True)
    print(f"results: {folder}; packed: {', '.join(str(f) for f in files)}", flush=True)
    print(f"unpack beside the clone: tar -xzf {files[0].name} -C benchmarks/results", flush=True)
    parts = json.loads((folder / "summary.json").read_text())["parts"]
    return 1 if any(p["status"] == "failed" for p in parts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
