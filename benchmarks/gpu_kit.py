"""A GPU node in one call: install the kit offline, run the GPU tests, the GPU benchmark and 200 steps of the MLPerf
v1.0 recipe on one GPU, eager and compiled, and write one JSON of the numbers.

    make gpu-kit                            # here, with internet: gpu-kit/ (wheels, at most 64 MiB)
    python3 benchmarks/gpu_kit.py [--kit gpu-kit] [--out DIR] [--steps 200] [--parts test-gpu,bench-gpu,train]
                                            # there, from the clone's root

On the node: the python that has CUDA torch, torchvision, lightning, timm and torchmetrics (the image's, or a
venv of it). The kit installs into it with ``pip install --no-index --find-links`` (no internet needed); then
``make test-gpu``, ``make bench-gpu`` and the two training runs. Results: ``<out>/gpu_kit.json`` (out: --out,
else $OUT, else gpu-kit-out), with each part's log beside it. Without CUDA each GPU part prints one ``skip:``
line and the file records it as skipped. Stdlib only until the kit is installed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = "nvidia_mlperf10_3264"  # ResNet-50, fp16, 8 GPUs x 408: one GPU's share
PER_GPU_BATCH = 408
WARMUP_STEPS = 20  # left out of images/s: cuDNN's autotuning and torch.compile's tracing happen here
COMPILE_MODES = (False, "default")
PARTS = ("test-gpu", "bench-gpu", "train")
# The training run, through the real entry point; atexit records the CUDA memory peak after Lightning is done.
TRAIN = """\
import atexit, json, runpy, sys
import torch
peak_file = sys.argv[1]
atexit.register(lambda: open(peak_file, "w").write(json.dumps(torch.cuda.max_memory_allocated() / 2**30)))
sys.argv = ["lightning_lars.train", *sys.argv[2:]]
runpy.run_module("lightning_lars.train", run_name="__main__", alter_sys=True)
"""


def requirements_of(wheel: Path, left_out: list[str]) -> list[str]:
    """The wheel's declared requirements (no extras, markers kept), less ``left_out`` (what the node has and what
    the kit left out for size)."""
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
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", *arguments], capture_output=True, text=True
    )
    log.write(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"error: pip install --no-index failed ({tail[0]}); the whole output is in {log.name}")


def install(kit: Path, log_path: Path) -> list[str]:
    """The project's dependencies and pytest from the kit, where the node lacks them (its torch, ... stay as
    they are), then the project's wheel itself. Returns what the kit left out for size."""
    manifest = kit / "kit.json"
    if not manifest.is_file():
        sys.exit(
            f"error: {kit} is no GPU kit (no kit.json): make it with `make gpu-kit` on a machine with internet"
        )
    kit_info = json.loads(manifest.read_text())
    wheel, left_out = kit / kit_info["project_wheel"], kit_info["left_out_for_size"]
    with log_path.open("w") as log:
        # the node's torch, lightning, ... are taken as they are: pip re-resolving them offline could only fail
        wanted = requirements_of(wheel, [*left_out, *kit_info["node_has"]])
        pip(["--find-links", str(kit), *wanted, "pytest"], log)
        # --no-deps: a dependency left out for size stays unmet; --force-reinstall: the kit's own build runs
        pip(["--no-deps", "--force-reinstall", str(wheel)], log)
    note = f" (left out for size: {', '.join(left_out)})" if left_out else ""
    print(f"installed {wheel.name} and its dependencies from {kit} into {sys.prefix}{note}", flush=True)
    return left_out


def run_part(name: str, command: list[str], log: Path, cuda: bool, wanted: bool = True) -> dict:
    if not wanted:
        print(f"skip: {name}: left out by --parts", flush=True)
        return {"status": "not run", "why": "--parts"}
    if not cuda:
        print(f"skip: {name}: no CUDA here (torch.cuda.is_available() is False)", flush=True)
        return {"status": "skipped", "why": "no CUDA"}
    print(f"run: {name} (log: {log})", flush=True)
    start = time.perf_counter()
    with log.open("w") as out:
        rc = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    seconds = time.perf_counter() - start
    print(f"  {name}: exit {rc} after {seconds:.0f} s", flush=True)
    return {"status": "passed" if rc == 0 else "failed", "exit_code": rc, "seconds": round(seconds, 1)}


def train_overrides(compile_mode: str | bool, steps: int, log_dir: Path) -> list[str]:
    """The command line of one timed run: the recipe at one GPU's share, on generated 224 px images."""
    return [
        f"recipe={RECIPE}",
        "data=synthetic",
        "data.resolution=224",
        "trainer.accelerator=gpu",
        "trainer.devices=1",
        f"batch.global_size={PER_GPU_BATCH}",
        f"trainer.max_steps={steps}",
        f"model.compile={str(compile_mode).lower()}",
        f"+callbacks.throughput.skip_batches={min(WARMUP_STEPS, steps // 2)}",
        # one evaluation, after the last step, on 2 batches: the recipe's first comes after 3 epochs
        "evaluation.every_n_epochs=null",
        f"evaluation.every_n_steps={steps}",
        "evaluation.offset_epochs=0",
        "trainer.limit_val_batches=2",
        "~logger",  # no W&B on an offline node
        f"paths.log_dir={log_dir}",
    ]


def training(compile_mode: str | bool, steps: int, out: Path, work: Path, cuda: bool, wanted: bool) -> dict:
    label = "on" if compile_mode else "off"
    name = f"{RECIPE} data=synthetic, {steps} steps, compile {compile_mode or 'off'}"
    log_dir, peak_file = work / f"compile-{label}", work / f"peak-{label}.json"
    command = [sys.executable, "-c", TRAIN, str(peak_file), *train_overrides(compile_mode, steps, log_dir)]
    log = out / f"train-compile-{label}.log"
    result = {"compile": compile_mode, **run_part(name, command, log, cuda, wanted)}
    if result["status"] != "passed":
        return result
    found = glob.glob(f"{log_dir}/**/results.json", recursive=True)
    if not found or not peak_file.is_file():
        return {**result, "status": "failed", "why": f"no results.json or memory peak: see {log.name}"}
    images_per_s = json.loads(Path(found[0]).read_text())["metrics"]["perf/images_per_sec"]
    result.update(
        images_per_s=round(images_per_s, 1),
        ms_per_step=round(PER_GPU_BATCH / images_per_s * 1e3, 2),
        peak_gib=round(json.loads(peak_file.read_text()), 2),
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kit", default=str(ROOT / "gpu-kit"), help="the folder make gpu-kit wrote")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-kit-out", help="where results go")
    parser.add_argument("--steps", type=int, default=200, help="training steps per run (default: 200)")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (default: all)"
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        parser.error(f"--parts takes {', '.join(PARTS)}; got {', '.join(sorted(parts - set(PARTS)))}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    left_out = install(Path(args.kit).resolve(), out / "install.log")

    import lightning  # installed (or found) now
    import torch

    cuda = torch.cuda.is_available()
    make = ["make", "--no-print-directory", "-C", str(ROOT), f"GPU_PY={sys.executable}"]
    results = {
        "device": torch.cuda.get_device_name()
        if cuda
        else f"cpu ({platform.processor() or platform.machine()})",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "kit_left_out_for_size": left_out,
        "parts": {},
    }
    results_file = out / "gpu_kit.json"

    def save() -> None:  # after every part: a run stopped by a time limit still leaves what it measured
        results_file.write_text(json.dumps(results, indent=2) + "\n")

    for part in ("test-gpu", "bench-gpu"):
        name = f"make {part}"
        results["parts"][name] = run_part(name, [*make, part], out / f"{part}.log", cuda, part in parts)
        save()
    results["training"] = {
        "recipe": RECIPE,
        "batch_per_gpu": PER_GPU_BATCH,
        "resolution_px": 224,
        "steps": args.steps,
        "timed_after_steps": min(WARMUP_STEPS, args.steps // 2),
        "runs": [],
    }
    # run outputs (checkpoints of ~100 MB) in a temporary folder: only the numbers come back
    with tempfile.TemporaryDirectory() as work:
        for mode in COMPILE_MODES:
            run = training(mode, args.steps, out, Path(work), cuda, "train" in parts)
            results["training"]["runs"].append(run)
            save()
    save()
    print(f"results: {results_file}", flush=True)
    statuses = [
        *(p["status"] for p in results["parts"].values()),
        *(r["status"] for r in results["training"]["runs"]),
    ]
    return 1 if "failed" in statuses else 0


if __name__ == "__main__":
    sys.exit(main())
