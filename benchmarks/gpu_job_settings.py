"""What the GPU job runs and for how long: the recipe's settings at one GPU's share, each part's time limit, the
timed run's command line and the helper programs it starts. Read by benchmarks/gpu_check.py (the job) and
benchmarks/gpu_check_parts.py (its parts). Stdlib only: the job reads it before the kit is installed."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = "nvidia_mlperf10_3264"  # ResNet-50, 16-mixed, LARS (nvidia form), 8 GPUs x 408: one GPU's share
PER_GPU_BATCH = 408
PRECISION = "16-mixed"  # the recipe's
LARS_FORM, LABEL_SMOOTHING = "nvidia", 0.1  # the recipe's; the bare loop takes them too
WARMUP_STEPS, TIMED_STEPS = 20, 100  # warm-up (autotuning, compilation) left out of images/s
JPEG_STEPS = 60  # 40 timed: the loader's steady rate shows within them
JPEG_IMAGES = PER_GPU_BATCH * 20  # ImageNet-like sizes, made on the node; plus a tenth for val
PROFILED_STEPS, PROFILE_AFTER = 20, 20  # steps recorded, and left out before them (warm-up, compilation)
# The parts share BUDGET_S (8 minutes with the install: 15 minutes of device time hold the machine's start, this
# job and one short rerun); each also stops at its own limit, and a part that finds under 30 s left is not run.
# Limits from the first H200 run (benchmarks/results/2026-11-27-h200/run1-summary.json, run1-train-compile-*.log):
# the entry point's first step 23.2 s after its start eager, 61.7 s compiled (ResNet-50 compiled cold), then 94 ms
# a step at 408 (data=synthetic, then copied from pageable memory every step), the whole compiled run of 150 steps
# 98.5 s. A later run of the same graph (same shapes and head) reads inductor's on-disk cache, so the JPEG and
# profile runs keep (a)'s shapes and 1000-class head. Order of value: (a) and three loaders of (b) answer "JPEGs at
# 0.9x synthetic", (f) and (g) the optimizer and no-read-back goals, together 470 s; the fourth loader, then (c),
# (d), (e), which explain and compile new shapes (bf16 dtypes, 816 images), take what the others left.
BUDGET_S = 480
LIMITS = {
    "install": 30,
    "recipe compiled": 100,
    "bare loop compiled": 60,
    "jpegs": 25,
    "jpeg torchvision": 45,
    "jpeg ffcv": 45,
    "jpeg gpu decode": 45,
    "optimizer steps": 45,
    "gpu tests": 75,
    "jpeg ffcv gpu decode": 45,
    "profile compiled": 45,
    "bf16 compiled": 90,
    "816 per GPU compiled": 90,
}
# Without the install no part runs, so it is not cut at its limit (its time counts against the budget the parts
# share, they get what is left); a pip that hangs offline is stopped
INSTALL_HANG_S = 180
SYNTHETIC = ["data=synthetic", "data.resolution=224"]
# (g)'s tests, most telling first: the no-read-back probe (a goal), the decoders on nvJPEG, the optimizers' float32
# steps; the subprocess runs that compile new shapes last. Every ``-m gpu`` test is named (tests/integration checks
# it against pytest's own collection); ``-v`` prints each result as it ends, so a part cut at its limit keeps them.
GPU_TEST = "tests/gpu/test_gpu.py::test_"
GPU_TESTS = [
    f"{GPU_TEST}no_host_read_between_log_steps_in_the_timed_recipe_at_16_mixed",
    f"{GPU_TEST}ffcv_resumes_mid_epoch_with_the_same_images_bit_for_bit_on_the_device",
    f"{GPU_TEST}device_decode_on_cuda_matches_the_pil_path",
    f"{GPU_TEST}beton_device_decode_on_cuda_matches_ffcvs_cpu_path",
    f"{GPU_TEST}gpu_pipeline_variant_matches_the_cpu_pipeline",
    f"{GPU_TEST}float32_optimizer_step_on_the_device_matches_the_float64_reference",
    f"{GPU_TEST}mixed_precision_and_channels_last_train_on_the_device",
    f"{GPU_TEST}recipe_runs_a_few_steps_on_nccl_at_world_size_one",
]
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
