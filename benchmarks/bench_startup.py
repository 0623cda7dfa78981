"""Time to feedback: a mistake's one-line error, and a `debug=toy` run, vs importing the stack they avoid.

Targets (issue 15, benchmark only): an error in under 2 s, `debug=toy` in under 20 s on 2 cores. Each case is a
fresh ``python -m lightning_lars.train`` process, timed to exit (median of ``--repeats``); the baseline is
``python -c "import torch, lightning"``, what every error cost when the entry point imported the stack first.
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

    with tempfile.TemporaryDirectory() as logs:  # one toy run: exit time and the plan line's start-up time
        toy = [*train, "recipe=demo", "debug=toy", f"paths.data_dir={args.data_dir}", f"paths.log_dir={logs}"]
        for name, root in roots.items():
            seconds, output = timed(toy, root)
            startup = re.search(r"start-up ([0-9.]+) s", output)
            first_step = re.search(r"first optimizer step done ([0-9.]+) s", output)
            failed = "" if "Results: recipe demo" in output else "  (did not finish: " + output.strip()[-200:] + ")"
            print(f"\ndebug=toy ({name}): {seconds:.1f} s to exit;"
                  f" start-up to the plan line {startup.group(1) + ' s' if startup else 'not printed'};"
                  f" first optimizer step {first_step.group(1) + ' s' if first_step else 'not printed'}{failed}")


if __name__ == "__main__":
    main()
