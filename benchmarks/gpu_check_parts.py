"""The GPU job's parts (benchmarks/gpu_check.py runs them once the kit is installed): each one subprocess under its
own limit (gpu_job_settings.LIMITS), its output in the results folder's ``logs/``, its numbers in the summary beside the
run of the same job it is compared with. A part that cannot run here records why: left out by ``--parts``, not
available (the node lacks the package, or the config refuses the key that selects it), no CUDA, budget spent.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import lightning
import torch
from gpu_job_settings import (  # benchmarks/gpu_job_settings.py, beside this script
    BUDGET_S,
    GPU_TESTS,
    JPEG_IMAGES,
    JPEG_STEPS,
    LABEL_SMOOTHING,
    LARS_FORM,
    LIMITS,
    MAKE_JPEGS,
    PER_GPU_BATCH,
    PRECISION,
    PROFILE_AFTER,
    PROFILED_STEPS,
    ROOT,
    TIMED_STEPS,
    TRAIN,
    WARMUP_STEPS,
    train_overrides,
)
from gpu_results import Job, environment, outcome_counts, read_json, results_folder

from lightning_lars.core.errors import UserError
from lightning_lars.recipe.plan import check_command_line

# s: the entry point took 23.2 s to its first step eager on the H200 (run1-summary.json): less only times out
MIN_PART_S = 30
RECIPE_COMPILED = "recipe compiled"
# (b)'s fourth loader runs after (g): the three before it answer the JPEG goal, and the budget holds three
JPEG_LATER = ("jpeg ffcv gpu decode",)


def refused(overrides: list[str]) -> str | None:
    """Why the entry point would refuse ``overrides`` (one line), or None: a loader not merged yet is reported."""
    try:
        check_command_line(overrides)
    except UserError as error:
        return f"the config refuses it: {error}"
    return None


class Parts:
    def __init__(self, job: Job, wanted: set[str], cuda: bool, work: Path):
        self.job, self.wanted, self.cuda, self.work = job, wanted, cuda, work

    def run(self, part: str, command: list[str], unavailable: str | None = None) -> dict:
        """``command`` under the part's limit (or what the budget has left); the result, not yet recorded."""
        result = {"limit_s": LIMITS[part]}
        if part not in self.wanted:
            return {**result, "status": "not run", "why": "left out by --parts"}
        if unavailable:
            return {**result, "status": "not available", "why": unavailable}
        if not self.cuda:
            return {**result, "status": "skipped", "why": "no CUDA here (torch.cuda.is_available() is False)"}
        limit = min(LIMITS[part], self.job.left_s())
        if limit < MIN_PART_S:
            return {**result, "status": "not run", "why": f"the job's budget is spent ({limit:.0f} s left)"}
        print(f"run: {part} (at most {limit:.0f} s)", flush=True)
        start = time.perf_counter()
        with self.job.log(part).open("a") as stream:
            stream.write(f"===== {part}: {' '.join(command)}\n")
            stream.flush()
            # its own process group: a part cut at its limit takes its compile workers and loader workers along
            process = subprocess.Popen(
                command, cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                result["exit_code"] = process.wait(timeout=limit)
                status = "passed" if result["exit_code"] == 0 else "failed"
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                status = "timed out"
        result.update(status=status, seconds=round(time.perf_counter() - start, 1))
        if status == "timed out":
            result["why"] = f"ran past its {limit:.0f} s"
        print(f"  {part}: {status} after {result['seconds']:.0f} s", flush=True)
        return result

    def train(self, part: str, overrides: list[str], batch: int, unavailable: str | None = None) -> dict:
        """One timed run of the entry point: images/s after the warm-up, ms/step, peak GiB."""
        peak_file = self.work / f"{part}-peak.json".replace(" ", "-")
        command = [sys.executable, "-c", TRAIN, str(peak_file), *overrides]
        result = self.run(part, command, unavailable)
        if result["status"] != "passed":
            return result
        log_dir = overrides[[o.startswith("paths.log_dir=") for o in overrides].index(True)].partition("=")[2]
        found = glob.glob(f"{log_dir}/**/results.json", recursive=True)
        if not found or not peak_file.is_file():
            return {**result, "status": "failed", "why": "no results.json or memory peak: see its log"}
        images_per_s = json.loads(Path(found[0]).read_text())["metrics"]["perf/images_per_sec"]
        return {
            **result,
            "images_per_s": round(images_per_s, 1),
            "ms_per_step": round(batch / images_per_s * 1e3, 2),
            "peak_gib": round(json.loads(peak_file.read_text()), 2),
        }

    def beside(self, result: dict, other: str) -> dict:
        """``result`` with the same job's ``other`` part beside it, and their ratio."""
        base = self.job.results["parts"].get(other, {})
        if result.get("images_per_s") and base.get("images_per_s"):
            result["beside"] = {"what": other, "images_per_s": base["images_per_s"]}
            result["ratio"] = round(result["images_per_s"] / base["images_per_s"], 3)
        return result


def run_parts(args, wanted: set[str], kit_info: dict, work: Path, started: float) -> Path:
    """Every part in order of value; returns the results folder."""
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else f"cpu ({platform.processor() or platform.machine()})"
    base = ROOT / "benchmarks" / "results"
    folder = Path(args.results).resolve() if args.results else results_folder(base, device.split(" (")[0])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    header = {
        "device": device,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.stdout.strip() or "unknown",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "glibc": platform.libc_ver()[1],  # what FFCV's wheel's manylinux tag is held to
        "kit": {
            k: kit_info.get(k)
            for k in ("size_mib", "left_out_for_size", "ffcv_wheel", "ffcv_missing", "ffcv_needs_glibc")
        },
    }
    job = Job(folder, BUDGET_S, header, started)
    environment(folder)
    if (work / "install.log").is_file():
        shutil.copy(work / "install.log", job.log("install"))
    installed = {
        "limit_s": LIMITS["install"],
        "status": "not run",
        "why": "--kit none: this environment as is",
    }
    if kit_info:
        seconds = round(time.monotonic() - started, 1)
        installed = {"limit_s": LIMITS["install"], "status": "passed", "seconds": seconds}
        if seconds > LIMITS["install"]:  # not cut (nothing runs without it): the parts share what is left
            installed["why"] = f"over its {LIMITS['install']} s: the parts get less"
    job.record("install", installed)
    try:
        every_part(job, Parts(job, wanted, cuda, work), kit_info, work)
    except Exception:  # noqa: BLE001 - the results so far, and why the job stopped, still come back
        job.stopped(traceback.format_exc())
    return folder


def every_part(job: Job, parts: Parts, kit_info: dict, work: Path) -> None:
    """(a), (b), (f), (g), (c), (d), (e): each recorded in ``job`` as it ends."""
    wanted, cuda, benchmarks = parts.wanted, parts.cuda, ROOT / "benchmarks"

    # (a) the recipe compiled, and the bare loop compiled at identical settings
    steps = WARMUP_STEPS + TIMED_STEPS
    recipe = parts.train(RECIPE_COMPILED, train_overrides("default", steps, work / "a"), PER_GPU_BATCH)
    job.record(RECIPE_COMPILED, {**recipe, "timed_steps": TIMED_STEPS})
    bench_json = work / "bare.json"
    bare = [
        sys.executable,
        str(benchmarks / "bench_gpu.py"),
        "--only",
        "bare-compiled",
        "--json",
        str(bench_json),
    ]
    bare += ["--batch-size", str(PER_GPU_BATCH), "--precision", PRECISION, "--lars-form", LARS_FORM]
    bare += [
        "--label-smoothing",
        str(LABEL_SMOOTHING),
        "--steps",
        str(TIMED_STEPS),
        "--warmup",
        str(WARMUP_STEPS),
    ]
    result = parts.run("bare loop compiled", bare)
    rate = read_json(bench_json).get("bare_loop", {}).get("compiled") if bench_json.is_file() else None
    if rate:
        result.update(images_per_s=round(rate, 1), timed_steps=TIMED_STEPS)
    job.record("bare loop compiled", result)
    # the number to read: the recipe over the bare loop, on the recipe's row
    job.record(RECIPE_COMPILED, parts.beside(job.results["parts"][RECIPE_COMPILED], "bare loop compiled"))

    # (b) real JPEGs through the entry point, four loaders, each beside (a)
    jpegs, betons = work / "images" / "jpeg", work / "images" / "ffcv"
    # 10 classes of images under (a)'s 1000-class head: the compiled graph is (a)'s, read from inductor's cache
    folder_data = ["data=imagefolder", f"data.root={jpegs}", "data.num_classes=10", "model.num_classes=1000"]
    ffcv_data = [
        "data=imagenet",
        f"data.train_path={betons}/train.beton",
        f"data.val_path={betons}/val.beton",
    ]
    ffcv_data += ["data.num_classes=10", "model.num_classes=1000"]
    no_ffcv = (
        None
        if importlib.util.find_spec("ffcv")
        else (kit_info.get("ffcv_missing") or "FFCV is not installed here (the kit brings it: make gpu-kit)")
    )
    loaders = {
        "jpeg torchvision": (folder_data, None),
        "jpeg ffcv": (ffcv_data, no_ffcv),
        "jpeg gpu decode": ([*folder_data, "data.decode=device"], None),
        # the same .beton files, their stored JPEG bytes decoded by nvJPEG (data/beton_device_decode.py)
        "jpeg ffcv gpu decode": ([*ffcv_data, "data.decode=device"], no_ffcv),
    }
    overrides = {
        name: train_overrides("default", JPEG_STEPS, work / name.replace(" ", "-"), data)
        for name, (data, _) in loaders.items()
    }
    why_not = {name: why or refused(overrides[name]) for name, (_, why) in loaders.items()}
    makes = [
        sys.executable,
        "-c",
        MAKE_JPEGS,
        str(work / "images"),
        str(JPEG_IMAGES),
        str(len(os.sched_getaffinity(0))),
    ]
    if not wanted & set(loaders):
        job.record("jpegs", {"limit_s": LIMITS["jpegs"], "status": "not run", "why": "no JPEG part wanted"})
    else:
        job.record("jpegs", {**parts.run("jpegs", makes), "images": JPEG_IMAGES})
    # what the part left, even cut at its limit: FFCV's files come after the JPEGs
    made = {name: (jpegs / "train").is_dir() for name in loaders} | {
        name: (betons / "train.beton").is_file() for name in ("jpeg ffcv", "jpeg ffcv gpu decode")
    }

    def jpeg_run(name: str) -> None:
        missing = why_not[name] or (
            None if made[name] or not cuda else "its images were not made: see logs/jpegs.log"
        )
        job.record(
            name, parts.beside(parts.train(name, overrides[name], PER_GPU_BATCH, missing), RECIPE_COMPILED)
        )

    for name in loaders:
        if name not in JPEG_LATER:
            jpeg_run(name)

    # (f) the optimizer steps, (g) the GPU tests
    optim_json = work / "optim.json"
    command = [
        sys.executable,
        str(benchmarks / "bench_gpu.py"),
        "--only",
        "optimizer",
        "--json",
        str(optim_json),
    ]
    result = parts.run("optimizer steps", command)
    if optim_json.is_file():
        numbers = read_json(optim_json)
        result.update(optimizer_ms=numbers.get("optimizer_ms"), tables=numbers.get("tables"))
    job.record("optimizer steps", result)
    tests = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-m", "gpu", "-rs", *GPU_TESTS]
    result = parts.run("gpu tests", tests)
    if job.log("gpu tests").is_file():
        result["counts"] = outcome_counts(job.log("gpu tests").read_text())
    job.record("gpu tests", result)
    for name in JPEG_LATER:
        jpeg_run(name)

    # (c) where the compiled recipe's step goes
    table = work / "profile.json"
    profiled = train_overrides("default", PROFILE_AFTER + PROFILED_STEPS + 1, work / "c")
    command = [sys.executable, str(benchmarks / "profile_steps.py"), "--json", str(table)]
    command += ["--steps", str(PROFILED_STEPS), "--skip", str(PROFILE_AFTER), "--", *profiled]
    result = parts.run("profile compiled", command)
    if table.is_file():
        result["ms_per_step_by_part"] = read_json(table)
    job.record("profile compiled", result)

    # (d) bf16 and (e) 816 per GPU, compiled, each beside (a)
    bf16 = [*train_overrides("default", steps, work / "d"), "trainer.precision=bf16-mixed"]
    job.record(
        "bf16 compiled", parts.beside(parts.train("bf16 compiled", bf16, PER_GPU_BATCH), RECIPE_COMPILED)
    )
    big = train_overrides("default", WARMUP_STEPS + 50, work / "e", batch=2 * PER_GPU_BATCH)
    result = parts.train("816 per GPU compiled", big, 2 * PER_GPU_BATCH)
    job.record("816 per GPU compiled", parts.beside(result, RECIPE_COMPILED))
