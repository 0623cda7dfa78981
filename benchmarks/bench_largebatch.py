"""The seed papers' claim in miniature: top-1 after the same epochs, small-batch SGD vs large-batch optimizers.

Each arm is one of the project's own recipes with only sizes changed: the batch, the epochs, and every
schedule mark (warmup, milestones, Neumann's SGD and reset periods; LAMB's marks in steps) scaled by the
ratio of epochs, on a prepared data set (``make prepare``; the demo when none is given), with a small ResNet
at a small resolution (lightning_lars/recipe/shrink.py). The large batch is a share of the data set
(``--ratio 0.1``: 10 % of the training images per step). Every run goes through the project's stack (Hydra
compose of ``recipe=NAME`` + overrides, ``lightning_lars.training.run.build``, an in-process ``Trainer.fit``)
and is appended to ``--runs`` (default recipes/runs.jsonl) as soon as it ends. A row names its data set by
name, sizes and the sha256 of its .beton files' samples (not their layout, not the machine's folder) and
records its set-up's factors (``--width``, ``--lr-rule``, ratio, epochs, px), so a run already in the file for
the same data, factors and seed is skipped: an interrupted bench resumes where it stopped, on this machine or
on the one the data folder travelled to (``--device cuda``). At the end: a table, one verdict per large-batch
arm (the gap its published claim is about, to small-batch SGD or, for NLCG's, to SGD at the same batch; 95 %
Welch CI over seeds), printed; with ``--readme README.md`` also that README's "Runs of ours" and its plot
(lightning_lars/report/runs_table.py).

    make bench-largebatch bench_data=DIR ratio=0.1 seeds=2 [only="sgd_small lamb"] [epochs=8 px=32]
    python benchmarks/bench_largebatch.py --data DIR --ratio 0.1 --seeds 2 [--only ...] [--runs FILE]
        [--width quarter|full] [--lr-rule linear|sqrt|reference] [--device cpu|cuda] [--threads 1] [--workers 1]
        [--holdout 0.1 --holdout-seed 0 --lr-scale 2]

A tuning trial (``--holdout``) trains on the training images less a seeded held-out share and evaluates that
share, never val.beton; its row records the share, seed and rule, and the LR scale, and no verdict reads it.
``benchmarks/fair_setup.sh`` runs the cells of a plan file (benchmarks/plan-fair.toml); its verdicts, at the
plan's n with Holm's correction, are ``python -m lightning_lars.report.fair_report``'s.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import sys
import time
import traceback
import warnings
from pathlib import Path

from lightning_lars.config import rules
from lightning_lars.config.jobs import compose_job
from lightning_lars.core.errors import UserError
from lightning_lars.recipe import catalog
from lightning_lars.recipe.bench_runs import (
    ARMS,
    EPOCHS,
    HOLDOUT_RULE,
    MLPERF_ARM,
    RESOLUTION,
    SMALL_BATCH,
    WIDTHS,
    lr_at_batch,
    manifest_images,
    portable,
    run_overrides,
)
from lightning_lars.recipe.shrink import (
    LR_RULES,
    large_batch,
    reference_lr,
    scaled_marks,  # noqa: F401  the tests read the bench's marks through here
)
from lightning_lars.report import bench_key, runs_file, runs_table
from lightning_lars.report.provenance import git_state

ROOT = Path(__file__).resolve().parents[1]


def train_once(overrides: list[str], seed: int, callbacks=()) -> tuple[list[float], float, str]:
    """Top-1 (percent) after each epoch, NaN from where the divergence guard stopped it; wall seconds; how the
    model ran ("eager", or torch.compile's mode). ``callbacks``: more Lightning callbacks for the run (a probe)."""
    import lightning as L
    from lightning_lars.callbacks.monitors.divergence import DivergenceError

    from lightning_lars.training import run

    class Curve(L.Callback):
        def __init__(self):
            self.top1 = []

        def on_validation_end(self, trainer, module):
            if not trainer.sanity_checking and "val/top1" in trainer.callback_metrics:
                self.top1.append(100 * float(trainer.callback_metrics["val/top1"]))

    cfg = compose_job(overrides)
    L.seed_everything(seed, workers=True, verbose=False)
    started = time.perf_counter()
    trainer, module, datamodule, _ = run.build(cfg)
    curve = Curve()
    trainer.callbacks += [curve, *callbacks]
    try:
        trainer.fit(module, datamodule=datamodule)
    except DivergenceError:
        pass
    epochs = int(cfg.trainer.max_epochs)
    mode = rules.compile_mode(cfg.model.compile, trainer.strategy.root_device.type) or "eager"
    return curve.top1 + [math.nan] * (epochs - len(curve.top1)), time.perf_counter() - started, mode


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")]
    return f"{os.cpu_count()}-core CPU ({names[0] if names else platform.machine()})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data", type=Path, default=ROOT / "data" / "demo", help="a folder made by make prepare"
    )
    parser.add_argument(
        "--ratio", type=float, default=0.1, help="large batch as a share of the training images"
    )
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--only", nargs="*", default=None, help=f"arms: {' '.join(a.name for a in ARMS)}")
    parser.add_argument(
        "--runs", type=Path, default=ROOT / "recipes" / "runs.jsonl", help="kept runs (resume)"
    )
    parser.add_argument("--readme", type=Path, default=None, help="rewrite its 'Runs of ours' and --plot")
    # what leaving out --readme does; the plan files' commands, written before it was the default, still name it
    parser.add_argument("--no-readme", action="store_true", help="print only (the default)")
    parser.add_argument("--resolution", type=int, default=RESOLUTION, help="px, train and eval")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "runs.png")
    parser.add_argument("--width", choices=tuple(WIDTHS), default="quarter", help="resnet10t's widths")
    parser.add_argument("--lr-rule", choices=LR_RULES, default="linear", help="large-batch LR (lr_overrides)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--workers", type=int, default=1, help="data loader processes")
    parser.add_argument(
        "--holdout",
        type=float,
        default=0.0,
        help="tuning: hold out this share of train and evaluate it, not val",
    )
    parser.add_argument("--holdout-seed", type=int, default=0, help="the held-out images' draw")
    parser.add_argument("--lr-scale", type=float, default=1.0, help="tuning: the rule's LR times this")
    args = parser.parse_args(argv)
    try:
        unknown = set(args.only or ()) - {a.name for a in ARMS}
        if unknown:
            raise UserError(
                f"only={' '.join(sorted(unknown))}: no such arm; pick from {' '.join(a.name for a in ARMS)}"
            )
        if not (args.data / "manifest.json").is_file():
            raise UserError(f"{args.data} has no manifest.json: make prepare src=IMAGEFOLDER out={args.data}")
        sizes = manifest_images(args.data)
        batch = large_batch(sizes["train"], args.ratio)
        missing = [name for name in bench_key.BETONS if not (args.data / name).is_file()]
        if missing:
            raise UserError(
                f"{args.data} has no {' '.join(missing)}: make prepare src=IMAGEFOLDER out={args.data}"
            )
        others = [
            a.name for a in ARMS if a.large and a.name != MLPERF_ARM and a.name in (args.only or a.name)
        ]
        fixed = [a for a in ARMS if a.lr_rule not in (None, args.lr_rule) and a.name in (args.only or ())]
        if fixed:
            raise UserError(
                f"lr_rule={args.lr_rule}: {' '.join(a.name for a in fixed)} trains on the {fixed[0].lr_rule} rule"
                f" only; run it with --lr-rule {fixed[0].lr_rule}"
            )
        if args.lr_rule == "reference" and others:
            raise UserError(
                f"lr_rule=reference: only {MLPERF_ARM} has MLCommons reference points, not {' '.join(others)};"
                f' add only="{bench_key.BASELINE_ARM} {MLPERF_ARM}"'
            )
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    quiet()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    git = git_state()
    commit = (git["git_sha"] or "?")[:10] + ("-dirty" if git["git_dirty"] else "")
    kept = runs_file.read_runs(args.runs)
    # by name, sizes and content: the folder is the machine's, the hash travels with the .beton files
    dataset = {"name": args.data.name, **sizes, "sha256": bench_key.data_hash(args.data)}
    setup = {"width": args.width, "lr_rule": args.lr_rule, "ratio": args.ratio, "device": args.device}
    setup |= {"holdout": args.holdout, "holdout_seed": args.holdout_seed, "lr_scale": args.lr_scale}
    trained = False
    # without --only: every arm that trains on this rule (sgd_sqrt on the square-root rule only)
    chosen = (
        [a for a in ARMS if a.name in args.only]
        if args.only
        else [a for a in ARMS if a.lr_rule in (None, args.lr_rule)]
    )
    for arm in chosen:
        recipe = compose_job([f"recipe={arm.recipe}"])
        if recipe.data.num_classes != sizes["classes"]:
            print(
                f"[bench] {arm.recipe}: head adapted to the data set's {sizes['classes']} classes"
                f" (the recipe has {recipe.data.num_classes})",
                flush=True,
            )
        b = batch if arm.large else SMALL_BATCH
        for seed in range(args.seeds):
            key = bench_key.RunKey(
                arm.name, args.data.name, args.ratio, args.epochs, args.resolution, seed,
                dataset["sha256"], args.width, args.lr_rule, args.holdout, args.lr_scale,
            )  # fmt: skip
            if any(bench_key.same_run(r, key) for r in kept):
                print(f"[bench] {arm.name} seed {seed}: kept from {args.runs}", flush=True)
                continue
            out = ROOT / "logs" / "bench_largebatch" / f"{arm.name}_seed{seed}"
            overrides = run_overrides(
                arm, recipe, b, args.epochs, args.data, sizes["classes"], seed, out, args.resolution,
                setup | {"workers": args.workers},
            )  # fmt: skip
            top1, wall, compiled = train_once(overrides, seed)
            # every factor of how it ran; sizes (ratio, epochs, px, batch) are the row's own keys
            factors = {
                "width": args.width,
                "device": args.device,
                "compile": compiled,
                "threads": args.threads or "torch default",
                "workers": args.workers,
            }
            if args.holdout:  # evaluated on held-out training images, never on val.beton
                factors["holdout"] = {"share": args.holdout, "seed": args.holdout_seed, "rule": HOLDOUT_RULE}
            if args.lr_scale != 1.0:
                factors["lr_scale"] = args.lr_scale
            if arm.large:  # the baseline's LR does not depend on the rule
                factors["lr_rule"] = args.lr_rule
                factors["lr_at_batch"] = round(lr_at_batch(overrides, recipe, b), 6)
                if args.lr_rule == "reference":
                    factors["reference_point"] = reference_lr(args.ratio, args.epochs)[0]
            trained = True
            row = runs_file.bench_row(
                arm=arm.name,
                recipe=arm.recipe,
                overrides=portable(overrides[1:], args.data, out),
                dataset=dataset,
                factors=factors,
                ratio=args.ratio,
                batch=b,
                epochs=args.epochs,
                resolution=args.resolution,
                seed=seed,
                top1=top1,
                wall_s=wall,
                machine=machine(),
                commit=commit,
            )
            runs_file.append_run(row, args.runs)
            kept.append(row)
            print(
                f"[bench] {arm.name} seed {seed}: top-1 per epoch {' '.join(f'{v:.1f}' for v in top1)}"
                f" ({wall:.0f} s)",
                flush=True,
            )
    here = bench_key.baseline_part(
        bench_key.RunKey(
            "",
            args.data.name,
            args.ratio,
            args.epochs,
            args.resolution,
            -1,
            dataset["sha256"],
            args.width,
            args.lr_rule,
            args.holdout,
            args.lr_scale,
        )  # fmt: skip
    )
    group = [  # this set-up's arms and small-batch SGD, on this data set at these sizes
        r
        for r in kept
        if (k := bench_key.key_of(r))
        and bench_key.baseline_part(k._replace(arm="", seed=-1)) == here
        and ((k.ratio, k.lr_rule) == (args.ratio, args.lr_rule) or k.arm == bench_key.BASELINE_ARM)
    ]
    print("\n" + runs_table.markdown(group) + "\n\n" + runs_table.verdicts(group), flush=True)
    if args.readme is not None:
        try:
            runs_table.update_readme(args.readme, kept, args.plot)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        print(f"[bench] {args.readme} 'Runs of ours' and {args.plot} rewritten from {args.runs}", flush=True)
    if trained and args.runs.resolve() == catalog.RUNS_FILE.resolve():  # the catalog lists the same runs
        (ROOT / "recipes" / "README.md").write_text(catalog.markdown(args.runs))
        print("[bench] recipes/README.md rewritten from the runs this bench appended to", flush=True)
    sys.stdout.flush()
    # numba's finalizers print KeyError tracebacks at exit after FFCV loaders ran (numba 0.68, FFCV 1.0.2)
    if trained:
        os._exit(0)


def quiet() -> None:
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("WANDB_MODE", "disabled")
    default_hook = sys.unraisablehook
    # numba's dispatcher finalizers raise KeyError when FFCV loaders are collected (numba 0.68, FFCV 1.0.2): noise.
    sys.unraisablehook = lambda u: (
        None
        if isinstance(u.exc_value, KeyError) and "numba" in str(traceback.extract_tb(u.exc_traceback)[-1:])
        else default_hook(u)
    )


if __name__ == "__main__":
    main()
