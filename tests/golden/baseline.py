"""Behaviour held fixed across a refactor: every recipe's ``--cfg job`` and the demo's first printed losses.

    python tests/golden/baseline.py save     # before a refactor: writes tests/golden/configs/*.yaml, demo_losses.txt
    python tests/golden/baseline.py check    # after it: the same configs (``_target_`` paths mapped through MOVED)
                                             # and the same 20 losses to the printed digits (4 decimals)

The losses need the demo data (``make demo-data``) and run ``make demo``'s command (about 5 min on 2 cores).
The config check also runs as a test (tests/integration/test_saved_configs.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIGS = HERE / "configs"
LOSSES = HERE / "demo_losses.txt"
NUM_LOSSES = 20
LOSS_LINE = re.compile(r"^\[train\] .* step (\d+)/\d+ .*\| loss ([0-9.]+) \|", re.M)

# Old `_target_` (and other dotted code paths) -> where the code lives now. A refactor that moves a class or
# function adds its line here; the saved configs stay as they were recorded.
MOVED: dict[str, str] = {
    # code paths named in a recipe's text (akiba_32k's deviation)
    "schedules.sgd_fraction_elu": "schedules.rmsprop_blend.SgdFractionElu",
    # the package rebuilt in layers (2026-11-26)
    "lightning_lars.errors": "lightning_lars.core.errors",
    "lightning_lars.atomic_files": "lightning_lars.core.atomic_files",
    "lightning_lars.extras": "lightning_lars.core.extras",
    "lightning_lars.config": "lightning_lars.config.compose",
    "lightning_lars.config_values": "lightning_lars.config.values",
    "lightning_lars.static_signature": "lightning_lars.config.static_signature",
    "lightning_lars.schedules": "lightning_lars.schedules.lr",
    "lightning_lars.source_schedules": "lightning_lars.schedules.source",
    "lightning_lars.scaling": "lightning_lars.schedules.scaling",
    "lightning_lars.bn": "lightning_lars.models.batch_norm",
    "lightning_lars.preflight": "lightning_lars.data.checks",
    "lightning_lars.recipe_plan": "lightning_lars.recipe.plan",
    "lightning_lars.recipe_keys": "lightning_lars.recipe.keys",
    "lightning_lars.recipe_card": "lightning_lars.recipe.card",
    "lightning_lars.recipes": "lightning_lars.recipe.catalog",
    "lightning_lars.resume": "lightning_lars.runtime.resume",
    "lightning_lars.preemption": "lightning_lars.runtime.preemption",
    "lightning_lars.callbacks.checkpointing": "lightning_lars.runtime.checkpointing",
    "lightning_lars.provenance": "lightning_lars.report.provenance",
    "lightning_lars.report": "lightning_lars.report.results",
    "lightning_lars.report_plot": "lightning_lars.report.plot",
    "lightning_lars.wandb_logger": "lightning_lars.report.wandb_logger",
    "lightning_lars.module": "lightning_lars.training.module",
    "lightning_lars.target_checks": "lightning_lars.training.target_checks",
    "lightning_lars.callbacks.throughput": "lightning_lars.callbacks.monitors.throughput",
    "lightning_lars.callbacks.hparam_monitor": "lightning_lars.callbacks.monitors.hparam_monitor",
    "lightning_lars.callbacks.trust_ratio": "lightning_lars.callbacks.monitors.trust_ratio",
    "lightning_lars.callbacks.progress": "lightning_lars.callbacks.monitors.progress",
    "lightning_lars.callbacks.run_history": "lightning_lars.callbacks.monitors.run_history",
    "lightning_lars.callbacks.time_to_target": "lightning_lars.callbacks.monitors.time_to_target",
    "lightning_lars.callbacks.first_step": "lightning_lars.callbacks.monitors.first_step",
    "lightning_lars.callbacks.divergence": "lightning_lars.callbacks.monitors.divergence",
    "lightning_lars.callbacks.schedule": "lightning_lars.callbacks.techniques.schedule",
    "lightning_lars.callbacks.batch_norm": "lightning_lars.callbacks.techniques.batch_norm",
    "lightning_lars.callbacks.batch_size_control": "lightning_lars.callbacks.techniques.batch_size_control",
    "lightning_lars.callbacks.rmsprop_warmup": "lightning_lars.callbacks.techniques.rmsprop_warmup",
    "lightning_lars.callbacks.weight_decay_follows_lr": "lightning_lars.callbacks.techniques.weight_decay_follows_lr",
    "lightning_lars.callbacks.weight_decay_schedule": "lightning_lars.callbacks.techniques.weight_decay_schedule",
    "lightning_lars.callbacks.neumann_evaluation": "lightning_lars.callbacks.techniques.neumann_evaluation",
    "lightning_lars.callbacks.evaluation": "lightning_lars.callbacks.techniques.evaluation",
    # schedules as frozen objects: the config names a constructor that turns the recipe's epochs into steps
    "lightning_lars.schedules.warmup_poly": "lightning_lars.schedules.lr.WarmupPoly.from_epochs",
    "lightning_lars.schedules.warmup_poly_steps": "lightning_lars.schedules.lr.WarmupPoly.from_steps",
    "lightning_lars.schedules.warmup_linear": "lightning_lars.schedules.lr.WarmupPoly.linear",
    "lightning_lars.schedules.warmup_step": "lightning_lars.schedules.lr.WarmupStep.from_epochs",
    "lightning_lars.schedules.piecewise": "lightning_lars.schedules.lr.Piecewise.from_epochs",
    "lightning_lars.schedules.warmup_caffe_poly": "lightning_lars.schedules.lr.CaffePoly.from_epochs",
    "lightning_lars.source_schedules.mxnet_warmup_poly": "lightning_lars.schedules.source.MXNetPoly.from_epochs",
    "lightning_lars.source_schedules.tf_lars_poly": "lightning_lars.schedules.source.TFLarsPoly.from_epochs",
    "lightning_lars.source_schedules.fujitsu_lr": "lightning_lars.schedules.source.FujitsuLR.from_epochs",
    "lightning_lars.source_schedules.fujitsu_wd_coefficient": "lightning_lars.schedules.source.FujitsuWeightDecay",
}


def recipe_names() -> list[str]:
    return sorted(p.stem for p in (HERE / "configs").glob("*.yaml")) or sorted(
        p.stem for p in (ROOT / "recipes").glob("*.yaml")
    )


def run(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "lightning_lars.train", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def job_config(recipe: str) -> str:
    done = run([f"recipe={recipe}", "--cfg", "job"], timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"recipe={recipe} --cfg job failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def mapped(text: str) -> str:
    """``text`` with every old code path replaced by its new one, in one pass (longest first: a module before
    its parent; a new path is never rewritten again)."""
    if not MOVED:
        return text
    pattern = "|".join(re.escape(old) for old in sorted(MOVED, key=len, reverse=True))
    return re.sub(rf"(?<![\w.])({pattern})(?![\w])", lambda m: MOVED[m.group(1)], text)


def demo_losses() -> list[tuple[int, str]]:
    done = run(["recipe=demo"])
    if done.returncode != 0:
        raise SystemExit(f"make demo's command failed: {done.stderr.strip()[-2000:]}")
    return [(int(step), loss) for step, loss in LOSS_LINE.findall(done.stdout + done.stderr)][:NUM_LOSSES]


def save(with_losses: bool) -> None:
    CONFIGS.mkdir(parents=True, exist_ok=True)
    names = recipe_names()
    with ThreadPoolExecutor(2) as pool:
        for name, text in zip(names, pool.map(job_config, names)):
            (CONFIGS / f"{name}.yaml").write_text(text)
    print(f"saved {len(names)} configs in {CONFIGS}")
    if with_losses:
        losses = demo_losses()
        LOSSES.write_text("".join(f"{step} {loss}\n" for step, loss in losses))
        print(f"saved {len(losses)} losses in {LOSSES}")


def config_differences(names: list[str] | None = None) -> list[str]:
    """One line per recipe whose ``--cfg job`` differs from the saved one (after mapping moved paths)."""
    names = names or recipe_names()
    with ThreadPoolExecutor(2) as pool:
        now = dict(zip(names, pool.map(job_config, names)))
    problems = []
    for name in names:
        saved = mapped((CONFIGS / f"{name}.yaml").read_text())
        if now[name] != saved:
            first = (
                next(
                    i
                    for i, (a, b) in enumerate(zip(saved.splitlines(), now[name].splitlines() + [""]))
                    if a != b
                )
                if saved.splitlines() != now[name].splitlines()
                else 0
            )
            problems.append(
                f"{name}: line {first + 1}: saved {saved.splitlines()[first : first + 1]}"
                f" now {now[name].splitlines()[first : first + 1]}"
            )
    return problems


def check(with_losses: bool) -> int:
    problems = config_differences()
    print("\n".join(problems) or f"configs: all {len(recipe_names())} equal the saved ones")
    if with_losses:
        saved = [tuple(line.split()) for line in LOSSES.read_text().splitlines()]
        now = [(str(step), loss) for step, loss in demo_losses()]
        if now != saved:
            problems.append(f"demo losses differ: saved {saved} now {now}")
            print(problems[-1])
        else:
            print(f"demo losses: the first {len(saved)} equal the saved ones")
    return 1 if problems else 0


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "check"
    configs_only = "--configs-only" in sys.argv
    if what == "save":
        save(not configs_only)
    else:
        sys.exit(check(not configs_only))
