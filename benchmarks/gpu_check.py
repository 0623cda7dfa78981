"""One job for a GPU node (``make gpu-check``): install the kit offline, then run the GPU parts in order of value,
each under its own time limit, writing ``gpu_check.json`` and ``gpu_check.md`` after every part.

    make gpu-kit                                   # here, with internet: gpu-kit/ (wheels, at most 64 MiB)
    make gpu-check [kit=gpu-kit] [out=DIR]         # there, from the clone's root, no internet
    python3 benchmarks/gpu_check.py [--kit gpu-kit] [--out DIR] [--budget 540] [--parts recipe,jpeg,bench,tests]

Parts, most valuable first (the job stops adding parts when its budget is spent; each gets what is left):
    recipe  ``recipe=nvidia_mlperf10_3264 data=synthetic`` through the entry point, one GPU's share (408 images,
            224 px, the recipe's 16-mixed and LARS), eager and compiled: images/s, ms/step, peak GiB.
    jpeg    the same recipe eager on generated 300-500 px JPEGs through ``data=imagefolder`` (torchvision's
            loader with every core); FFCV where the node has it.
    bench   ``benchmarks/bench_gpu.py`` at the recipe's batch and precision: ours vs the bare loop, eager and
            compiled; the optimizer steps; the loaders.
    tests   ``pytest -m gpu tests/gpu``.
    precision  the recipe eager at bf16-mixed, beside its 16-mixed run above (bf16 was the slower on the H200).
    levers  the moonshot's levers through the recipe: CUDA graphs (reduce-overhead), 816 images per GPU (the
            H200's 141 GB held 19 GB at 408), max-autotune, each beside the compiled run at 408.
    profile    where a step's time goes (benchmarks/profile_steps.py: Lightning's PyTorchProfiler over 20 steps,
            summed into forward, backward, optimizer, data, our callbacks, idle), eager and compiled.
On the node: the python with CUDA torch, torchvision, lightning, timm and torchmetrics. The kit installs into
it with ``pip install --no-index --find-links``, then the clone itself editable (so the clone's code is what
runs). Output (``--out``, else $OUT, else gpu-check-out): at most 8 files. Without CUDA each part prints one
``skip:`` line. Stdlib only until the kit is installed.
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
RECIPE = "nvidia_mlperf10_3264"  # ResNet-50, 16-mixed, LARS, 8 GPUs x 408: one GPU's share
PER_GPU_BATCH = 408
PRECISION = "16-mixed"  # the recipe's; bench_gpu runs at it too, so the ratio compares like with like
WARMUP_STEPS = 20  # left out of images/s: cuDNN's autotuning and torch.compile's tracing happen here
PARTS = ("recipe", "jpeg", "bench", "tests", "precision", "profile", "levers")
# The moonshot's levers, each beside the recipe compiled with `default` at 408 (compile mode, per-GPU batch);
# max-autotune last: on the H200 its compile alone outran the 87 s left to it
LEVERS = (("reduce-overhead", PER_GPU_BATCH), ("default", 816), ("max-autotune-no-cudagraphs", PER_GPU_BATCH))
PROFILED_STEPS, PROFILE_AFTER = 20, 20  # steps recorded, and left out before them (warm-up, compilation)
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
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    log.write(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"error: pip install --no-index failed ({tail[0]}); the whole output is in {log.name}")


def install(kit: Path, log_path: Path) -> list[str]:
    """The project's dependencies and pytest from the kit where the node lacks them (its torch, ... stay),
    then this clone editable: the code that runs is the clone's. Returns what the kit left out for size."""
    manifest = kit / "kit.json"
    if not manifest.is_file():
        sys.exit(
            f"error: {kit} is no GPU kit (no kit.json): make it with `make gpu-kit` on a machine with internet"
        )
    kit_info = json.loads(manifest.read_text())
    left_out = kit_info["left_out_for_size"]
    with log_path.open("w") as log:
        wanted = requirements_of(kit / kit_info["project_wheel"], [*left_out, *kit_info["node_has"]])
        pip(["--find-links", str(kit), *wanted, "pytest"], log)
        # built in pip's isolated environment with the kit's setuptools (the node's may be older or absent)
        pip(["--find-links", str(kit), "--no-deps", "--editable", str(ROOT)], log)
    note = f" (left out for size: {', '.join(left_out)})" if left_out else ""
    print(f"installed the kit {kit} and this clone (editable) into {sys.prefix}{note}", flush=True)
    return left_out


class Job:
    """The parts' results, saved as JSON and a markdown table after every part; the time budget they share."""

    def __init__(self, out: Path, budget_s: float, cuda: bool, header: dict):
        self.out, self.cuda, self.deadline = out, cuda, time.monotonic() + budget_s
        self.results = {**header, "parts": {}}

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, command: list[str], log: Path, limit_s: float, wanted: bool) -> dict:
        """``command`` under ``min(limit_s, what is left)``; its output appended to ``log``."""
        if not wanted:
            print(f"skip: {name}: left out by --parts", flush=True)
            return {"status": "not run", "why": "--parts"}
        if not self.cuda:
            print(f"skip: {name}: no CUDA here (torch.cuda.is_available() is False)", flush=True)
            return {"status": "skipped", "why": "no CUDA"}
        limit = min(limit_s, self.left_s())
        if limit < 30:
            print(f"skip: {name}: the job's time budget is spent", flush=True)
            return {"status": "not run", "why": "time budget spent"}
        print(f"run: {name} (at most {limit:.0f} s; log: {log.name})", flush=True)
        start = time.perf_counter()
        with log.open("a") as stream:
            stream.write(f"\n===== {name}: {' '.join(command)}\n")
            stream.flush()
            try:
                rc = subprocess.run(
                    command, cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT, timeout=limit
                ).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        seconds = round(time.perf_counter() - start, 1)
        print(
            f"  {name}: {'timed out' if rc == 'timeout' else f'exit {rc}'} after {seconds:.0f} s", flush=True
        )
        return {"status": "passed" if rc == 0 else "failed", "exit_code": rc, "seconds": seconds}

    def record(self, key: str, value) -> None:
        self.results["parts"][key] = value
        (self.out / "gpu_check.json").write_text(json.dumps(self.results, indent=2) + "\n")
        (self.out / "gpu_check.md").write_text(markdown(self.results))


def markdown(results: dict) -> str:
    """One table: each measurement beside the bare loop's from the same job where there is one."""
    lines = [
        f"# gpu-check on {results['device']} ({results['date']}, commit {results['commit']})",
        "",
        f"torch {results['torch']} (CUDA {results['cuda']}), lightning {results['lightning']},"
        f" Python {results['python']}",
        "",
        "| part | status | images/s | ms/step | peak GiB | s |",
        "|---|---|---|---|---|---|",
    ]
    for name, part in results["parts"].items():
        cells = [part.get(k, "") for k in ("images_per_s", "ms_per_step", "peak_gib", "seconds")]
        lines.append(f"| {name} | {part['status']} | " + " | ".join(str(c) for c in cells) + " |")
    bench = results["parts"].get("bench", {})
    bare = bench.get("bare_loop", {})
    for mode in ("eager", "compiled"):
        recipe = results["parts"].get(
            f"recipe, data=synthetic, compile {'off' if mode == 'eager' else 'default'}"
        )
        if bare.get(mode) and recipe and recipe.get("images_per_s"):
            ratio = recipe["images_per_s"] / bare[mode]
            lines.append(f"\nrecipe / bare loop ({mode}, same batch and precision): {ratio:.3f}")
    if bench.get("tables"):
        lines += ["", "bench_gpu.py, same job:", "", bench["tables"]]
    for name, part in results["parts"].items():
        if part.get("ms_per_step_by_part"):
            lines += ["", f"{name}: ms per step", "", "| part | host | device |", "|---|---|---|"]
            for what, ms in part["ms_per_step_by_part"].items():
                lines.append(f"| {what} | {ms['host_ms']:.2f} | {ms['device_ms']:.2f} |")
    return "\n".join(lines) + "\n"


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
        # one evaluation, after the last step, on 2 batches: the recipe's first comes after 3 epochs
        "evaluation.every_n_epochs=null",
        f"evaluation.every_n_steps={steps}",
        "evaluation.offset_epochs=0",
        "trainer.limit_val_batches=2",
        "~logger",  # no W&B on an offline node
        "~callbacks.checkpoint",  # 100 MB a save, and not what is timed
        f"paths.log_dir={log_dir}",
    ]


def training(
    job: Job,
    name: str,
    overrides: list[str],
    work: Path,
    limit_s: float,
    wanted: bool,
    batch: int = PER_GPU_BATCH,
) -> dict:
    """One timed run of the entry point (``overrides`` from train_overrides, run folder under ``work/name``)."""
    log_dir, peak_file = work / name, work / f"{name}-peak.json"
    command = [sys.executable, "-c", TRAIN, str(peak_file), *overrides]
    result = job.run(name, command, job.out / "train.log", limit_s, wanted)
    if result["status"] != "passed":
        return result
    found = glob.glob(f"{log_dir}/**/results.json", recursive=True)
    if not found or not peak_file.is_file():
        return {**result, "status": "failed", "why": "no results.json or memory peak: see train.log"}
    images_per_s = json.loads(Path(found[0]).read_text())["metrics"]["perf/images_per_sec"]
    return {
        **result,
        "images_per_s": round(images_per_s, 1),
        "ms_per_step": round(batch / images_per_s * 1e3, 2),
        "peak_gib": round(json.loads(peak_file.read_text()), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kit", default=str(ROOT / "gpu-kit"), help="the folder make gpu-kit wrote")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out", help="where results go")
    parser.add_argument("--budget", type=float, default=540, help="seconds for all parts (default: 540)")
    parser.add_argument("--steps", type=int, default=200, help="training steps per timed run (default: 200)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
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
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    header = {
        "device": torch.cuda.get_device_name()
        if cuda
        else f"cpu ({platform.processor() or platform.machine()})",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.stdout.strip() or "unknown",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "kit_left_out_for_size": left_out,
    }
    job = Job(out, args.budget, cuda, header)
    steps = args.steps
    with tempfile.TemporaryDirectory() as tmp:  # run folders: only the numbers come back
        work = Path(tmp)
        for mode, limit in ((False, 90), ("default", 150)):
            name = f"synthetic-{mode or 'eager'}"
            overrides = train_overrides(mode, steps, work / name)
            result = training(job, name, overrides, work, limit, "recipe" in parts)
            job.record(f"recipe, data=synthetic, compile {mode or 'off'}", result)
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_data import NUM_CLASSES, make_jpegs

        jpegs = work / "jpeg-images"
        if cuda and "jpeg" in parts:
            make_jpegs(jpegs, PER_GPU_BATCH * 10)  # 10 steps an epoch
        data = ["data=imagefolder", f"data.root={jpegs}", f"data.num_classes={NUM_CLASSES}"]
        overrides = train_overrides(False, min(steps, 60), work / "jpeg", data)
        result = training(job, "jpeg", overrides, work, 120, "jpeg" in parts)
        job.record("recipe, generated JPEGs via torchvision, compile off", result)
        bench_json = work / "bench.json"
        bench = [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_gpu.py"),
            "--batch-size",
            str(PER_GPU_BATCH),
        ]
        bench += ["--precision", PRECISION, "--json", str(bench_json)]
        result = job.run("bench", bench, out / "bench-gpu.log", 150, "bench" in parts)
        if bench_json.is_file():
            result.update(json.loads(bench_json.read_text()))
        job.record("bench", result)
        tests = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "gpu",
            "-rs",
            "tests/gpu",
        ]
        job.record("tests", job.run("tests", tests, out / "test-gpu.log", 150, "tests" in parts))
        overrides = [*train_overrides(False, steps, work / "bf16"), "trainer.precision=bf16-mixed"]
        result = training(job, "bf16", overrides, work, 90, "precision" in parts)
        job.record("recipe, data=synthetic, compile off, bf16-mixed", result)
        for mode, limit in ((False, 90), ("default", 150)):
            table = work / f"profile-{mode or 'eager'}.json"
            overrides = train_overrides(mode, PROFILE_AFTER + PROFILED_STEPS + 1, work / f"profile-{mode}")
            command = [sys.executable, str(ROOT / "benchmarks" / "profile_steps.py"), "--json", str(table)]
            command += ["--steps", str(PROFILED_STEPS), "--skip", str(PROFILE_AFTER), "--", *overrides]
            result = job.run(
                f"profile, compile {mode or 'off'}", command, out / "profile.log", limit, "profile" in parts
            )
            if table.is_file():
                result["ms_per_step_by_part"] = json.loads(table.read_text())
            job.record(f"profile, compile {mode or 'off'}", result)
        for mode, batch in LEVERS:
            name = f"lever-{mode}-{batch}"
            overrides = train_overrides(mode, steps, work / name, batch=batch)
            result = training(job, name, overrides, work, 150, "levers" in parts, batch)
            job.record(f"recipe, data=synthetic, compile {mode}, {batch} per GPU", result)
    print(f"results: {out / 'gpu_check.json'}, {out / 'gpu_check.md'}", flush=True)
    return 1 if any(p["status"] == "failed" for p in job.results["parts"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
