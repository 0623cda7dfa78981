"""Does ``model.compile`` pay on this machine, and does our LightningModule cost anything over a bare loop?

Part 1, the demo recipe (timm resnet10t, 32 px, batch 128, 10 classes, our LARS and the recipe's schedule):
our `ImageClassifier` under Lightning's Trainer against a bare PyTorch loop with the same model, optimizer,
param groups, LR per step and batches, each eager and compiled with every torch.compile mode that runs on a
CPU. Part 2: ResNet-50 at 224 px on generated data through our module, fp32 and bf16 autocast, eager and
compiled. Each cell is a fresh process with an empty inductor cache (TORCHINDUCTOR_CACHE_DIR), so every
compile is paid in full, as in a user's first run.

Columns: images/s over the measured steps (after the warm-up steps); "to 1st step" from building the model
to the end of the first optimizer step; "compile s" = first step minus a steady step (compiled rows);
"epochs to pay back" = compile seconds / seconds saved per epoch against the eager row of the same kind
(demo epoch: 5,000 images; ResNet-50: ImageNet's 1,281,167). Goal: ours within 1.1x of the bare loop.

    make bench-speed        # python benchmarks/bench_speed.py [--steps 20] [--r50-steps 4] [--skip-r50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_MODES = ("default", "max-autotune-no-cudagraphs")  # reduce-overhead records CUDA graphs: GPU only
DEMO_EPOCH_IMAGES, IMAGENET_EPOCH_IMAGES = 5000, 1_281_167


def batches(count: int, batch: int, resolution: int, classes: int) -> list[tuple]:
    import torch

    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(batch, 3, resolution, resolution, generator=generator), torch.randint(classes, (batch,)))
        for _ in range(count)
    ]


def recipe_parts(recipe: str, overrides: list[str]):
    """The recipe's model config, optimizer partial and LR schedule, as the entry point builds them."""
    from hydra.utils import instantiate

    from lightning_lars.config import schema
    from lightning_lars.recipe.plan import check_command_line, make_plan

    cfg = check_command_line([f"recipe={recipe}", *overrides])
    optimizer = instantiate(schema.plain(cfg.optimizer))
    plan = make_plan(cfg, recipe, cfg.epoch_length.num_train_images, 1, 1)
    return cfg, optimizer, plan.lr_schedule


def step_times(stamps: list[float], started: float, warm_up: int) -> tuple[float, list[float]]:
    """(seconds from ``started`` to the first step's end, the steady steps' durations)."""
    return stamps[0] - started, [b - a for a, b in zip(stamps[warm_up:], stamps[warm_up + 1 :])]


def run_ours(recipe, overrides, mode, steps, warm_up, batch, resolution, precision) -> dict:
    import lightning as L
    import torch
    from hydra.utils import instantiate
    from lightning_lars.callbacks.techniques.schedule import ScheduleCallback

    cfg, optimizer, schedule = recipe_parts(recipe, overrides)
    data = batches(steps + warm_up + 1, batch, resolution, cfg.data.num_classes)
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    stamps: list[float] = []

    class Stamp(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            stamps.append(time.perf_counter())

    started = time.perf_counter()
    module = instantiate(cfg.model, optimizer=optimizer, compile=mode, _partial_=True)(lr_schedule=schedule)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        max_steps=len(data),
        logger=False,
        callbacks=[ScheduleCallback(), Stamp()],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_dataloaders=loader)
    return dict(zip(("first_step_s", "steps_s"), step_times(stamps, started, warm_up)))


def run_bare(recipe, overrides, mode, steps, warm_up, batch, resolution, precision) -> dict:
    """The same work with nothing around it: timm model, the recipe's optimizer and groups, a for loop."""
    import timm
    import torch
    import torch.nn.functional as F

    import lightning_lars.models  # noqa: F401  (timm names the project's models)
    from lightning_lars.optim.param_groups import param_groups

    cfg, optimizer_factory, schedule = recipe_parts(recipe, overrides)
    data = batches(steps + warm_up + 1, batch, resolution, cfg.data.num_classes)
    torch.manual_seed(0)
    started = time.perf_counter()
    model = timm.create_model(
        cfg.model.arch, num_classes=cfg.data.num_classes, zero_init_last=cfg.model.zero_init_last
    )
    if cfg.model.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if mode:
        model.compile(mode=mode)
    weight_decay = optimizer_factory.keywords.get("weight_decay", 0.0)
    optimizer = optimizer_factory(param_groups(model, weight_decay, cfg.model.exclusion_rule), lr=schedule(0))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    stamps = []
    model.train()
    for step, (images, labels) in enumerate(data):
        for group in optimizer.param_groups:
            group["lr"] = schedule(step)
        if cfg.model.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with autocast:
            loss = F.cross_entropy(model(images), labels, label_smoothing=cfg.model.label_smoothing)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        stamps.append(time.perf_counter())
    return dict(zip(("first_step_s", "steps_s"), step_times(stamps, started, warm_up)))


DEMO = dict(recipe="demo", overrides=[], batch=128, resolution=32, precision="32-true")
R50 = dict(
    recipe="nvidia_mlperf10_3264",
    overrides=["data=synthetic", "trainer.accelerator=cpu", "data.num_classes=1000"],
    batch=8,  # our choice: a few steps of 8 images take ~2 s each on 2 cores
    resolution=224,
)


def cells(args) -> list[dict]:
    demo = [
        {**DEMO, "loop": loop, "mode": mode, "steps": args.steps, "warm_up": 3, "kind": "demo"}
        for mode in (False, *args.modes)
        for loop in ("ours", "bare")
    ]
    r50 = [
        {**R50, "loop": "ours", "mode": mode, "precision": precision, "steps": args.r50_steps, "warm_up": 2}
        | {"kind": f"r50 {precision}"}
        for precision in ("32-true", "bf16-mixed")
        for mode in (False, "default")
    ]
    return demo + ([] if args.skip_r50 else r50)


def measure(cell: dict, timeout_s: float) -> dict:
    """One cell in a fresh process with an empty inductor cache: every compile paid in full."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--cell", json.dumps(cell)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return {**cell, "error": f"not done after {timeout_s:.0f} s (--cell-timeout)"}
    if done.returncode:
        return {**cell, "error": (done.stdout + done.stderr).strip().splitlines()[-1]}
    return {**cell, **json.loads(done.stdout.strip().splitlines()[-1])}


def row(result: dict, eager: dict | None, epoch_images: int) -> str:
    name = f"{result['kind']:<15} {result['loop']:<5} {str(result['mode'] or 'eager'):<27}"
    if "error" in result:
        return f"{name} error: {result['error']}"
    steady = statistics.median(result["steps_s"])
    rate = result["batch"] / steady
    text = f"{name} {rate:9.1f} {result['first_step_s']:11.1f}"
    if not result["mode"] or eager is None or "error" in eager:
        return text + f" {'-':>10} {'-':>18}"
    compile_s = result["first_step_s"] - steady
    saved = epoch_images / (eager["batch"] / statistics.median(eager["steps_s"])) - epoch_images / rate
    payback = f"{compile_s / saved:.2f}" if saved > 0 else "never (slower)"
    return text + f" {compile_s:10.1f} {payback:>18}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="measured demo steps per cell")
    parser.add_argument("--r50-steps", type=int, default=4, help="measured ResNet-50 steps per cell")
    parser.add_argument("--skip-r50", action="store_true")
    parser.add_argument("--modes", nargs="*", default=list(CPU_MODES), help="compile modes to time (demo)")
    parser.add_argument("--cell-timeout", type=float, default=900, help="seconds per cell before giving up")
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell, print its JSON
    args = parser.parse_args()
    if args.cell:
        cell = json.loads(args.cell)
        run = run_ours if cell["loop"] == "ours" else run_bare
        keys = ("recipe", "overrides", "mode", "steps", "warm_up", "batch", "resolution", "precision")
        print(json.dumps(run(*(cell[k] for k in keys))))
        return

    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    results = []
    for cell in cells(args):
        results.append(measure(cell, args.cell_timeout))
        print(f"  done: {cell['kind']} {cell['loop']} {cell['mode'] or 'eager'}", file=sys.stderr, flush=True)
    print(
        f"{'case':<15} {'loop':<5} {'compile mode':<27} {'images/s':>9} {'to 1st step':>11}"
        f" {'compile s':>10} {'epochs to pay back':>18}"
    )
    for result in results:
        eager = next(
            r
            for r in results
            if r["kind"] == result["kind"] and r["loop"] == result["loop"] and not r["mode"]
        )
        epoch = DEMO_EPOCH_IMAGES if result["kind"] == "demo" else IMAGENET_EPOCH_IMAGES
        print(row(result, eager, epoch))
    print("ours / bare (images/s ratio; goal >= 1/1.1 = 0.91):")
    for mode in (False, *args.modes):
        pair = {
            r["loop"]: r for r in results if r["kind"] == "demo" and r["mode"] == mode and "error" not in r
        }
        if len(pair) == 2:
            ratio = statistics.median(pair["bare"]["steps_s"]) / statistics.median(pair["ours"]["steps_s"])
            print(f"  {str(mode or 'eager'):<27} {ratio:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end (2 cores shared: rates vary run to run)")


if __name__ == "__main__":
    main()
