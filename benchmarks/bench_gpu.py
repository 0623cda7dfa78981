"""GPU benchmark (`make bench-gpu`): ResNet-50 at 224 px, ours against the plain alternative, in one run.

1. Training images/s: our LightningModule through Lightning's Trainer against a bare PyTorch loop (same timm
   ResNet-50, same LARS, same GPU-resident batch, the same autocast (bf16, or fp16 with a GradScaler as
   Lightning's 16-mixed has), channels_last), each eager and under ``torch.compile``. The ratio is what the
   module and Trainer cost.
2. Optimizer step ms on ResNet-50's parameters: our LARS and LAMB, eager and compiled, against
   ``torch.optim.SGD(fused=True)``, ``AdamW(fused=True)`` and timm's ``Lars(foreach=True)``.
3. Images/s the loader feeds at 224 px (random resized crop + flip + normalise, batch on the GPU): the
   torchvision DataLoader on generated JPEGs, and FFCV's where FFCV is installed.

    python benchmarks/bench_gpu.py [--batch-size 256 --precision bf16-mixed --steps 30 --warmup 10 --skip-compile]
                                   [--json FILE]   # the numbers and the printed tables, for make gpu-check

Needs only a CUDA torch, torchvision, lightning, timm and torchmetrics plus this package (the small
wheelhouse); no data and no internet. Without a GPU it stops with one line.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_gpu_components import lars, loader_images_per_s, optimizer_step_ms  # beside this script


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def pooled_batches(batch_size: int, steps: int):
    """A few batches on the GPU, cycled: the loader is measured separately (part 3)."""
    from lightning_lars.data.synthetic import SyntheticBatches

    generator = torch.Generator(device="cuda").manual_seed(0)
    pool = [
        (
            torch.randn(batch_size, 3, 224, 224, device="cuda", generator=generator).contiguous(
                memory_format=torch.channels_last
            ),
            torch.randint(1000, (batch_size,), device="cuda", generator=generator),
        )
        for _ in range(2)
    ]
    return SyntheticBatches(pool, steps)


def ours_images_per_s(batch_size: int, steps: int, warmup: int, compile_model: bool, precision: str) -> float:
    """Our ImageClassifier + LARS through Lightning's Trainer; timed over the last ``steps``."""
    import lightning as L

    from lightning_lars.optim.lars import LARS
    from lightning_lars.training.module import ImageClassifier

    class StepTimer(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == warmup:
                torch.cuda.synchronize()
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if batch_idx == warmup + steps - 1:
                torch.cuda.synchronize()
                self.elapsed = time.perf_counter() - self.start

    optimizer = functools.partial(LARS, momentum=0.9, weight_decay=5e-5, form="mlperf")
    module = ImageClassifier(
        "resnet50",
        1000,
        optimizer,
        lambda step: 1.0,
        zero_init_last=True,
        channels_last=True,
        compile="default" if compile_model else False,  # model.compile: as a run compiles it
    )
    timer = StepTimer()
    trainer = L.Trainer(
        accelerator="gpu",
        devices=1,
        precision=precision,
        max_steps=warmup + steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
        limit_val_batches=0,
    )
    trainer.fit(module, train_dataloaders=pooled_batches(batch_size, warmup + steps))
    return batch_size * steps / timer.elapsed


def bare_images_per_s(
    batch_size: int,
    steps: int,
    warmup: int,
    compile_model: bool,
    precision: str,
    form: str = "mlperf",
    label_smoothing: float = 0.0,
) -> float:
    """The same model, optimizer, precision and batches in a plain PyTorch loop (fp16: with a GradScaler, as
    Lightning's 16-mixed); ``form`` and ``label_smoothing`` as a recipe sets them, to compare with its run."""
    import timm

    from lightning_lars.optim.param_groups import param_groups

    model = timm.create_model("resnet50", num_classes=1000, zero_init_last=True).cuda()
    model = model.to(memory_format=torch.channels_last)
    optimizer = lars(param_groups(model, 5e-5), form=form)
    forward = torch.compile(model) if compile_model else model
    batches = iter(pooled_batches(batch_size, warmup + steps))
    dtype = torch.float16 if precision == "16-mixed" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    for step in range(warmup + steps):
        if step == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        images, labels = next(batches)
        with torch.autocast("cuda", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(forward(images), labels, label_smoothing=label_smoothing)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return batch_size * steps / (time.perf_counter() - start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=256, help="images per step (default: 256)")
    parser.add_argument("--steps", type=int, default=30, help="timed training steps (default: 30)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (default: 10)")
    parser.add_argument("--skip-compile", action="store_true", help="eager only (compiling takes minutes)")
    parser.add_argument("--loader-batches", type=int, default=32, help="timed loader batches (default: 32)")
    parser.add_argument(
        "--loader-batch-size", type=int, default=64, help="images per loader batch (default: 64)"
    )
    parser.add_argument(
        "--precision",
        choices=("bf16-mixed", "16-mixed"),
        default="bf16-mixed",
        help="autocast (default bf16)",
    )
    parser.add_argument("--json", help="also write the numbers and the printed tables to this file")
    parser.add_argument(
        "--only",
        choices=("all", "bare-compiled", "optimizer"),
        default="all",
        help="one part: the bare loop compiled (beside a recipe's run), or the optimizer steps (default: all)",
    )
    parser.add_argument(
        "--lars-form", default="mlperf", help="the bare loop's LARS form (a recipe's: nvidia)"
    )
    parser.add_argument(
        "--label-smoothing", type=float, default=0.0, help="the bare loop's (a recipe's: 0.1)"
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        fail(
            "bench_gpu needs a CUDA GPU and a CUDA build of torch (torch.cuda.is_available() is False here);"
            " on a CPU run make bench-optim and make bench-data"
        )
    torch.backends.cudnn.benchmark = True
    import lightning
    import timm

    print(
        f"device {torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda}),"
        f" lightning {lightning.__version__}, timm {timm.__version__}, batch {args.batch_size}, 224 px,"
        f" {args.precision}, channels_last",
        flush=True,
    )
    numbers: dict[str, dict] = {"images_per_s": {}, "optimizer_ms": {}, "loader_images_per_s": {}}
    tables = io.StringIO()  # the tables as printed, for --json

    def save() -> None:
        """The numbers so far: written after every row, so a run cut at its time limit keeps what it measured."""
        if args.json:
            Path(args.json).write_text(
                json.dumps({**numbers, "tables": tables.getvalue().strip()}, indent=2) + "\n"
            )

    with contextlib.redirect_stdout(Tee(sys.stdout, tables)):
        measure_all(args, numbers, save)
    save()
    return 0


def optimizer_table(numbers: dict, save) -> None:
    print("\n| optimizer step on ResNet-50 params (fp32) | ms/step (median of 50) |\n|---|---|")
    for name, ms in optimizer_step_ms(50):
        numbers["optimizer_ms"][name] = ms
        print(f"| {name} | {ms if isinstance(ms, str) else f'{ms:.2f}'} |", flush=True)
        save()


class Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
            stream.flush()
        return len(text)


def measure_all(args, numbers: dict, save) -> None:
    if args.only == "bare-compiled":
        rate = bare_images_per_s(
            args.batch_size,
            args.steps,
            args.warmup,
            True,
            args.precision,
            args.lars_form,
            args.label_smoothing,
        )
        numbers["bare_loop"] = {"compiled": rate, "timed_steps": args.steps, "lars_form": args.lars_form}
        print(f"bare loop, compiled, LARS {args.lars_form} form: {rate:.0f} images/s", flush=True)
        return
    if args.only == "optimizer":
        optimizer_table(numbers, save)
        return
    print("\n| ResNet-50 training | eager img/s | torch.compile img/s |\n|---|---|---|")
    rates = {}
    for label, measure in (
        ("bare PyTorch loop", bare_images_per_s),
        ("ours (Lightning + ImageClassifier)", ours_images_per_s),
    ):
        eager = measure(args.batch_size, args.steps, args.warmup, False, args.precision)
        compiled = (
            None
            if args.skip_compile
            else measure(args.batch_size, args.steps, args.warmup, True, args.precision)
        )
        rates[label] = (eager, compiled)
        numbers["images_per_s"][label] = {"eager": eager, "compiled": compiled}
        print(f"| {label} | {eager:.0f} | {'-' if compiled is None else f'{compiled:.0f}'} |", flush=True)
    (bare_eager, bare_compiled), (ours_eager, ours_compiled) = rates.values()
    ratio_compiled = "-" if ours_compiled is None else f"{ours_compiled / bare_compiled:.3f}"
    print(f"| ours / bare | {ours_eager / bare_eager:.3f} | {ratio_compiled} |")
    numbers["bare_loop"] = {"eager": bare_eager, "compiled": bare_compiled}

    save()
    optimizer_table(numbers, save)

    print("\n| loader, 224 px RandomResizedCrop + flip + normalise, to the GPU | img/s |\n|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, value in loader_images_per_s(
            args.loader_batch_size, args.loader_batches, Path(tmp)
        ).items():
            numbers["loader_images_per_s"][name] = value
            print(f"| {name} | {value if isinstance(value, str) else f'{value:.0f}'} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
