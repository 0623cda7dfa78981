"""`make check recipe=NAME seeds=K`: is the recipe's claim met? K seeds, mean +- std, one-sided t-test.

Runs ``python -m lightning_lars.train recipe=NAME seed=S ...`` for K seeds (the real entry point, one after
another), reads each run's ``results.json``, and tests H1: mean top-1 > target with a one-sample, one-sided
Student t-test, the rule of the modded-nanogpt and airbench records (a claim needs n seeds and p < alpha).
The target is ``callbacks.time_to_target.target_top1`` when set (MLPerf's target), else ``published.top1``.

    python -m lightning_lars.check --recipe demo --seeds 5 [--alpha 0.05] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lightning_lars.config.compose import compose_command_line
from lightning_lars.config.paths import PROJECT_ROOT, is_checkout, run_root
from lightning_lars.core.errors import UserError
from lightning_lars.recipe import catalog, published
from lightning_lars.recipe.catalog import RUNS_FILE
from lightning_lars.report import mlperf
from lightning_lars.report.results import RESULTS_FILE
from lightning_lars.report.seed_stats import t_sf


def one_sided_test(values: list[float], target: float) -> dict[str, float]:
    """One-sample t-test of H1: mean > target. Returns n, mean, std (n-1), t, df and the p-value."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return {"n": n, "mean": mean, "std": math.nan, "t": math.nan, "df": 0, "p": math.nan}
    std = statistics.stdev(values)
    if std == 0:  # identical runs: the sign of the difference decides
        t = math.inf if mean > target else (-math.inf if mean < target else math.nan)
    else:
        t = (mean - target) / (std / math.sqrt(n))
    p = t_sf(t, n - 1) if not math.isnan(t) else 1.0
    return {"n": n, "mean": mean, "std": std, "t": t, "df": n - 1, "p": p}


def target_of(cfg) -> tuple[float, str]:
    """(target top-1 in percent, where it comes from)."""
    ttt = (cfg.get("callbacks") or {}).get("time_to_target") or {}
    if ttt.get("target_top1") is not None:
        return float(ttt["target_top1"]), "callbacks.time_to_target.target_top1"
    top1 = (cfg.get("published") or {}).get("top1")
    if isinstance(top1, (int, float)) and not isinstance(top1, bool):
        return float(top1), "published.top1"
    reason = published.no_target_reason(cfg.get("published"))
    if reason:
        raise UserError(
            f"the recipe has no target (published.no_target): {reason};"
            " to test a number of your own: callbacks.time_to_target.target_top1=PERCENT"
        )
    raise UserError(
        "no target to test against: set callbacks.time_to_target.target_top1=PERCENT"
        " or published.top1 in the recipe"
    )


def run_seed(recipe: str, seed: int, run_dir: Path, overrides: list[str]) -> dict:
    """One training run through the real entry point; returns its results.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "console.log"  # what the run printed; its train.log is Hydra's, the run's logged records
    command = [
        sys.executable,
        "-m",
        "lightning_lars.train",
        f"recipe={recipe}",
        f"seed={seed}",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    with log.open("w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=run_root())
        try:
            code = child.wait()
        finally:  # interrupted (Ctrl-C, SIGTERM from a scheduler): take the training run down with us
            if child.poll() is None:
                child.terminate()
                child.wait()
    if code != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        raise UserError(f"seed {seed} failed (exit {code}): {tail[0]}; full log: {log}")
    return json.loads((run_dir / RESULTS_FILE).read_text())


def report(rows: list[dict], target: float, source: str, alpha: float, statistic: str = "final") -> str:
    top1 = [r["top1"] for r in rows]
    test = one_sided_test(top1, target)
    lines = [f"{'seed':>6}  {'top-1 %':>8}  {'time to target':>15}  {'wall s':>8}"]
    for r in rows:
        ttt = f"{r['time_to_target_s']:.1f} s" if r["time_to_target_s"] is not None else "not reached"
        line = f"{r['seed']:>6}  {r['top1']:>8.2f}  {ttt:>15}  {r['wall_s']:>8.1f}"
        if r.get("source_epoch") is not None:  # the epoch the source's own log would print at that eval
            line += f"  epoch {r['source_epoch']:g} (source's count)"
        lines.append(line + (f"  [{r['taken']}]" if r.get("taken") else ""))
    reached = sum(r["time_to_target_s"] is not None for r in rows)
    lines += [
        "",
        f"target   {target:.2f} % ({source})",
        f"per run  {statistic}: {published.STATISTICS[statistic]}",
        f"top-1    mean {test['mean']:.3f} %, std {test['std']:.3f} (n={test['n']})",
        f"reached  {reached}/{len(rows)} runs reached the target during training",
    ]
    if test["n"] < 2:
        lines.append("test     needs seeds >= 2")
    elif test["std"] == 0:  # the t-test's arithmetic (scipy's too) gives t = +-inf, p = 0 or 1: no evidence
        lines.append(
            f"test     not decided: every seed gave {test['mean']:.2f} %, no spread to test against; run more"
            " seeds or evaluate on more images"
        )
    else:
        verdict = (
            f"claim supported: mean top-1 > {target:.2f} % at alpha {alpha:g}"
            if test["p"] < alpha
            else f"not shown: mean top-1 > {target:.2f} % is not significant at alpha {alpha:g}"
        )
        lines.append(
            f"test     one-sided t = {test['t']:.3f}, df = {test['df']}, p = {test['p']:.4g}: {verdict}"
        )
    return "\n".join(lines)


def runs_row(recipe: str, overrides: list[str], records: list[dict], rows: list[dict], out: Path) -> dict:
    """The "Runs of ours" row of recipes/README.md for this check (`lightning_lars.recipe.catalog.RUN_COLUMNS`)."""
    test = one_sided_test([r["top1"] for r in rows], math.nan)
    std = "-" if math.isnan(test["std"]) else f"{test['std']:.2f}"
    reached = [r["time_to_target_s"] for r in rows if r["time_to_target_s"] is not None]
    wall = statistics.fmean(r["wall_s"] for r in rows)
    time_text = (
        f"{statistics.fmean(reached):.1f} s to target ({len(reached)}/{len(rows)} reached)"
        if reached
        else f"{wall:.1f} s wall, target not reached"
    )
    epochs = sorted({f"{float(r.get('epochs', math.nan)):.4g}" for r in records})
    root = run_root()
    log = str(out.relative_to(root)) if out.is_relative_to(root) else str(out)
    return {
        "recipe": recipe + (f" ({' '.join(overrides)})" if overrides else ""),
        "hardware": ", ".join(
            sorted({str(r.get("hardware", f"{r.get('world_size', '?')} devices")) for r in records})
        ),
        "epochs": ", ".join(epochs),
        "top-1 (mean +- std, n)": f"{test['mean']:.2f} +- {std} %, n={test['n']}",
        "time": time_text,
        "date": time.strftime("%Y-%m-%d"),
        "log or W&B run": log,
    }


def record_run(row: dict, runs_file: Path) -> None:
    """Append ``row`` to the runs file; in a checkout, regenerate recipes/README.md from it."""

    runs_file.parent.mkdir(parents=True, exist_ok=True)
    with runs_file.open("a") as out:
        out.write(json.dumps(row) + "\n")
    if runs_file.resolve() == catalog.RUNS_FILE.resolve() and is_checkout():
        (PROJECT_ROOT / "recipes" / "README.md").write_text(catalog.markdown())
    listed = runs_file.resolve() == catalog.RUNS_FILE.resolve()
    where = ' (the table "Runs of ours" in recipes/README.md)' if listed else ""
    print(f"[check] row added to {runs_file}{where}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--recipe", required=True)
    parser.add_argument(
        "--seeds", type=int, default=3, help="number of runs (seeds first_seed, first_seed+1, ...)"
    )
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the one-sided test")
    parser.add_argument("--out", type=Path, help="folder for the runs (default logs/<recipe>/check/<time>)")
    parser.add_argument(
        "--runs-file",
        type=Path,
        default=None,
        help="append the result row here (default recipes/runs.jsonl, which recipes/README.md lists)",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. debug=toy")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run `finally` blocks: no orphaned training run
    try:
        if args.seeds < 1:
            raise UserError(f"seeds={args.seeds}: run at least 1 seed (2 or more for the test)")
        cfg = compose_command_line([f"recipe={args.recipe}", *args.overrides])
        target, source = target_of(cfg)
        statistic = published.statistic_of(cfg.get("published"))
        count = published.source_epoch_count(cfg.get("published"))
        out = args.out or run_root() / "logs" / args.recipe / "check" / time.strftime("%Y-%m-%d_%H-%M-%S")
        rows, records = [], []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            record = run_seed(args.recipe, seed, out / f"seed_{seed}", args.overrides)
            records.append(record)
            metrics = record["metrics"]
            if "val/top1" not in metrics:  # the judged accuracy is the last evaluation during training
                raise UserError(
                    f"seed {seed} ended before its first evaluation (no val/top1); train at least"
                    " the recipe's first evaluation (evaluation.*), or set run.validate_at_end=true"
                )
            top1, taken = published.run_value(record, statistic, target)
            reached_at = next((e["step"] for e in published.evaluations(record) if e["top1"] >= target), None)
            rows.append(
                {
                    "seed": seed,
                    "top1": top1,
                    "taken": taken,
                    "source_epoch": None
                    if reached_at is None
                    else published.source_epoch(
                        reached_at, count, cfg.epoch_length.num_train_images, cfg.batch.global_size
                    ),
                    "wall_s": metrics.get("time/wall_s", math.nan),
                    "time_to_target_s": metrics.get("target/time_to_target_s"),
                }
            )
            print(f"[check] seed {seed}: top-1 {rows[-1]['top1']:.2f} % ({out / f'seed_{seed}'})", flush=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    text = report(rows, target, source, args.alpha, statistic)
    if cfg.mlperf.round is not None:  # MLPerf-derived: the package's RCP checker on each run's mlperf.log
        run_dirs = [out / f"seed_{row['seed']}" for row in rows]
        text += "\n" + "\n".join(mlperf.rcp_report(str(cfg.mlperf.round), run_dirs, out / "rcp"))
    (out / "check.txt").write_text(text + "\n")
    print(f"\nCheck: recipe {args.recipe}, {len(rows)} seeds\n{text}", flush=True)

    # a debug run (debug=toy) is no run of the recipe: its row stays in its own folder, out of the tracked table
    debug = any(re.fullmatch(r"\+?debug=(?!null$).+", o) for o in args.overrides)
    runs_file = args.runs_file or (out / "runs.jsonl" if debug else RUNS_FILE)
    record_run(runs_row(args.recipe, args.overrides, records, rows, out), runs_file)


if __name__ == "__main__":
    main()
