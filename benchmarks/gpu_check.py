"""One job for a GPU node (``make gpu-check``), at most 8 minutes with the kit's install: the GPU parts in order of
value, each under its own time limit (``LIMITS``, which add up to the budget), results in the repository under
``benchmarks/results/<date>-<device>/`` and packed into ``$OUT`` (benchmarks/gpu_results.py).

    make gpu-kit                                   # here, with internet: gpu-kit/ (wheels, FFCV's built here)
    make gpu-check [kit=gpu-kit|none] [out=DIR]    # there, from the clone's root, no internet
    python3 benchmarks/gpu_check.py [--kit gpu-kit|none] [--out DIR] [--results DIR] [--parts a,b,...]

Parts, most valuable first (one GPU's share of ``recipe=nvidia_mlperf10_3264``: 408 images, 224 px, 16-mixed,
LARS in its nvidia form, cuDNN's autotuner on, as the recipe runs; images/s after the first 20 steps):
    (a) the recipe compiled through the entry point, 100 timed steps; beside it benchmarks/bench_gpu.py's bare
        loop compiled at identical settings (batch, precision, LARS form, label smoothing, autotuner, steps).
    (b) generated 300-500 px JPEGs through the entry point, compiled: torchvision's CPU loader, FFCV (the
        kit's wheel; the JPEGs converted on the node), decoding on the GPU (``data.decode=device``), each beside
        (a). A loader the config does not offer, or a package the node lacks, is reported "not available".
    (c) a step profile of the compiled recipe (benchmarks/profile_steps.py: forward, backward, optimizer,
        data, idle).  (d) bf16-mixed compiled, beside (a).  (e) 816 images per GPU compiled, beside (a).
    (f) the optimizer steps (bench_gpu.py --only optimizer).  (g) ``pytest -m gpu tests/gpu``.
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

from gpu_results import pack  # benchmarks/gpu_results.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
RECIPE = "nvidia_mlperf10_3264"  # ResNet-50, 16-mixed, LARS (nvidia form), 8 GPUs x 408: one GPU's share
PER_GPU_BATCH = 408
PRECISION = "16-mixed"  # the recipe's
LARS_FORM, LABEL_SMOOTHING = "nvidia", 0.1  # the recipe's; the bare loop takes them too
WARMUP_STEPS, TIMED_STEPS = 20, 100  # warm-up (autotuning, compilation) left out of images/s
JPEG_STEPS = 60  # 40 timed: the loader's steady rate shows within them
JPEG_IMAGES = PER_GPU_BATCH * 20  # ImageNet-like sizes, made on the node; plus a tenth for val
PROFILED_STEPS, PROFILE_AFTER = 20, 20  # steps recorded, and left out before them (warm-up, compilation)
# seconds per part, in order of value; with the install they add up to the budget (8 minutes). The compiled runs
# after (a) find inductor's cache warm for the same shapes.
LIMITS = {
    "install": 30,
    "recipe compiled": 90,
    "bare loop compiled": 55,
    "jpegs": 25,
    "jpeg torchvision": 40,
    "jpeg ffcv": 35,
    "jpeg gpu decode": 30,
    "profile compiled": 35,
    "bf16 compiled": 35,
    "816 per GPU compiled": 40,
    "optimizer steps": 20,
    "gpu tests": 45,
}
# Without the install no part runs, so it is not cut at its limit (its time counts against the budget the parts
# share, they get what is left); a pip that hangs offline is stopped
INSTALL_HANG_S = 180
SYNTHETIC = ["data=synthetic", "data.resolution=224"]
# The training run, through the real entry point; atexit records the CUDA memory peak after Lightning is done.
TRAIN = """\
import atexit, json, runpy, sys
import torch
peak_file = sys.argv[1]
atexit.register(lambda: open(peak_file, "w").write(json.dumps(torch.cuda.max_memory_allocated() / 2**30)))
sys.argv = ["lightning_lars.train", *sys.argv[2:]]
runpy.run_module("lightning_lars.train", run_name="__main__", alter_sys=True)
"""
# JPEGs on every core (each process its own seed and file numbers), then FFCV's files where FFCV imports
MAKE_JPEGS = """\
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
sys.path.insert(0, "benchmarks")
from bench_data import make_jpegs
root, count, workers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
share = -(-count // workers)
with ProcessPoolExecutor(workers) as pool:
    list(pool.map(make_jpegs, [root / "jpeg"] * workers, [share] * workers, range(workers),
                  [i * share for i in range(workers)]))
try:
    import ffcv  # noqa: F401
except ImportError as error:
    sys.exit(print(f"FFCV does not import ({error}): no .beton files") or 0)
from lightning_lars.data.prepare import convert
convert(root / "jpeg", root / "ffcv", max_resolution=512, num_workers=workers, progress=False)
"""


def train_overrides(
    compile_mode: str | bool,
    steps: int,
    log_dir: Path,
    data: list[str] = SYNTHETIC,
    batch: int = PER_GPU_BATCH,
) -> list[str]:
    """The command line of one timed run: the recipe at one GPU's share (or ``batch`` images in one pass)."""
    return [
        f"recipe={RECIPE}",
        *data,
        "trainer.accelerator=gpu",
        "trainer.devices=1",
        f"batch.global_size={batch}",
        f"batch.max_per_device={batch}",
        f"trainer.max_steps={steps}",
        f"model.compile={str(compile_mode).lower()}",
        f"+callbacks.throughput.skip_batches={min(WARMUP_STEPS, steps // 2)}",
        # no evaluation: compiled, it would compile the eval graph too (tens of seconds), and only training is timed
        "evaluation.every_n_epochs=null",
        f"evaluation.every_n_steps={steps}",
        "evaluation.offset_epochs=0",
        "trainer.limit_val_batches=0",
        "~logger",  # no W&B on an offline node
        "~callbacks.checkpoint",  # 100 MB a save, and not what is timed
        f"paths.log_dir={log_dir}",
    ]


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
