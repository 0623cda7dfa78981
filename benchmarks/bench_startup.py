"""Time to feedback: a mistake's one-line error, and a `debug=toy` run, vs importing the stack they avoid.

Targets (benchmark only): an error in under 2 s, `debug=toy` in under 20 s on 2 cores. Each case is a
fresh ``python -m lightning_lars.train`` process, timed to exit (median of ``--repeats``); the baseline is
``python -c "import torch, lightning"``, what every error cost when the entry point imported the stack first.
Toy runs: the toy as configured (the demo's JPEGs through torchvision) against the same toy on the demo's FFCV
files (``data=demo``, what it read before), and the README's ``recipe=resnet50_32k debug=toy``.
``--other-root DIR`` also times the same commands from another checkout (e.g. the commit before, made with
``git worktree add /tmp/before <sha>``) in the same run.

    make bench-startup        # PYTHONPATH=. python benchmarks/bench_startup.py [--repeats 3] [--data-dir data]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ERRORS = {
    "mistyped recipe": ["recipe=goyal8k"],
    "wrong-type value": ["trainer.max_epochs=abc"],
    "missing dataset": ["paths.data_dir=/nonexistent"],
}


def timed(command: list[str], root: Path, env_extra: dict | None = None) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(root), "WANDB_MODE": "offline", **(env_extra or {})}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done.stdout + done.stderr


def median_time(command: list[str], root: Path, repeats: int) -> float:
    return statistics.median(timed(command, root)[0] for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=str(ROOT / "data"), help="holds demo/ (make demo-data)")
    parser.add_argument("--other-root", default=None, help="another checkout to time the same commands from")
    args = parser.parse_args()
    train = [sys.executable, "-m", "lightning_lars.train"]
    roots = {"this checkout": ROOT, **({"other checkout": Path(args.other_root)} if args.other_root else {})}

    baseline = median_time([sys.executable, "-c", "import torch, lightning"], ROOT, args.repeats)
    print(f"python -c 'import torch, lightning': {baseline:.2f} s (median of {args.repeats})\n")
    header = f"{'case':<22}" + "".join(f"{name:>16}" for name in roots) + f"{'vs import':>11}"
    print(header)
    for case, overrides in ERRORS.items():
        times = {name: median_time([*train, *overrides], root, args.repeats) for name, root in roots.items()}
        cells = "".join(f"{t:>14.2f} s" for t in times.values())
        print(f"{case:<22}{cells}{times['this checkout'] / baseline:>10.2f}x")

    # debug=toy: the toy as it runs now (the demo's JPEGs through torchvision) against the same toy on the demo's
    # FFCV files (`data=demo`, what it read before), and the README's ResNet-50 example
    toys = {
        "demo toy": ["recipe=demo"],
        "demo toy, FFCV (data=demo)": ["recipe=demo", "data=demo"],
        "resnet50_32k toy": ["recipe=resnet50_32k"],
    }
    print(
        f"\n{'debug=toy (median of ' + str(args.repeats) + ')':<34}{'to exit':>10}{'plan line':>11}{'1st step':>10}"
    )
    for name, root in roots.items():
        for case, overrides in toys.items():
            cells = [
                toy_run([*train, *overrides, "debug=toy", f"paths.data_dir={args.data_dir}"], root)
                for _ in range(args.repeats)
            ]
            medians = [statistics.median(c[i] for c in cells) for i in range(3)]
            label = case if len(roots) == 1 else f"{case} ({name})"
            print(f"{label:<34}" + "".join(f"{m:>9.1f}s" + " " * (i > 0) for i, m in enumerate(medians)))


def toy_run(command: list[str], root: Path) -> tuple[float, float, float]:
    """One toy run in its own log folder: seconds to exit, to the plan line, to the first optimizer step."""
    with tempfile.TemporaryDirectory() as logs:
        seconds, output = timed([*command, f"paths.log_dir={logs}"], root)
    if "Results: recipe" not in output:
        sys.exit(f"toy run failed: {' '.join(command)}\n{output.strip()[-2000:]}")
    startup = re.search(r"start-up ([0-9.]+) s", output)
    first_step = re.search(r"first optimizer step done ([0-9.]+) s", output)
    return seconds, float(startup.group(1)), float(first_step.group(1))


if __name__ == "__main__":
    main()
