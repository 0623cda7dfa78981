"""A bench plan (``benchmarks/plan-fair.toml``): the cells ``benchmarks/fair_setup.sh`` runs, in order, the seeds
each verdict reads (the first n in seed order, fixed before the runs) and the decision rule (level, family-wise
alpha, correction, margins). Read with the standard library's ``tomllib``; imports nothing of the project's but
its errors and ``bench_key``.

    python -m lightning_lars.report.plan PLAN [--stages first sqrt-sgd ...]   one cell per line, for the shell:
        ARMS|SEEDS|OPTIONS|KIND: verdict, tuning (its rows go to the tuning file) or tuned:RATIO:RULE (each arm
        at the LR scale its trials chose: ``--scale-for ARM RATIO RULE --tuning-runs FILE`` prints it)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path

from lightning_lars.core.errors import UserError
from lightning_lars.report.bench_key import BASELINE_ARM, key_of

DEFAULT_PLAN = Path(__file__).resolve().parents[2] / "benchmarks" / "plan-fair.toml"
CORRECTIONS = ("holm", "none")


@dataclass(frozen=True)
class Cell:
    stage: str
    arms: tuple[str, ...]
    seeds: int  # seeds 0 .. seeds-1 of each arm
    ratio: float
    lr_rule: str
    holdout: float = 0.0  # a tuning trial's share of the training images held out and evaluated; 0: none
    holdout_seed: int = 0  # a tuning trial's draw of the held-out images
    lr_scale: float = 1.0  # a tuning trial's multiplier of the rule's LR
    tuned: bool = False  # runs at the LR scale the tuning trials chose for each arm (``chosen_scale``)

    def options(self) -> str:
        """bench_largebatch.py's options for this cell, after the plan's set-up."""
        trial = f" --holdout {self.holdout:g} --holdout-seed {self.holdout_seed} --lr-scale {self.lr_scale:g}"
        return f"--ratio {self.ratio:g} --lr-rule {self.lr_rule}" + (trial if self.holdout else "")


@dataclass(frozen=True)
class Decision:
    level: float = 0.95
    alpha: float = 0.05
    correction: str = "holm"
    margin_in_scope: float = 1.0
    margin_wide: float = 3.0


@dataclass(frozen=True)
class Plan:
    setup: dict
    decision: Decision
    planned: dict  # "arm" or "arm@ratio" -> n; "default"
    cells: tuple[Cell, ...]
    tuning: dict
    source: str = ""

    def planned_n(self, arm: str, ratio: float, one_point: bool = False) -> int:
        """The seeds a verdict reads of ``arm`` at ``ratio``: per arm and share, else per arm, else the default;
        for a 1-point line, [planned.one_point]'s entry first (its own n, for its narrower margin)."""
        tables = [self.planned.get("one_point", {}), self.planned] if one_point else [self.planned]
        for table in tables:
            for name in (f"{arm}@{ratio:g}", arm):
                if name in table:
                    return int(table[name])
        if "default" in self.planned:
            return int(self.planned["default"])
        raise UserError(f"{self.source}: [planned] names no n for {arm} and has no default: add default = 6")

    def setup_options(self) -> str:
        s = self.setup
        return f"--width {s['width']} --epochs {s['epochs']} --resolution {s['resolution']}"


def load(path: Path = DEFAULT_PLAN) -> Plan:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"{path} cannot be read as a plan ({err}): see benchmarks/plan-fair.toml") from None
    try:
        decision = Decision(**raw.get("decision", {}))
        cells = tuple(
            Cell(
                c["stage"],
                tuple(c["arms"].split()),
                int(c["seeds"]),
                float(c["ratio"]),
                c["lr_rule"],
                tuned=bool(c.get("tuned", False)),
            )  # fmt: skip
            for c in raw.get("cell", [])
        )
        cells = _with_tuning(cells, raw.get("tuning", {}), raw.get("tune", []))
        plan = Plan(dict(raw["setup"]), decision, dict(raw.get("planned", {})), cells, raw.get("tuning", {}))
    except (KeyError, TypeError) as err:
        raise UserError(f"{path}: a plan needs [setup], [decision] and [[cell]] entries ({err})") from None
    if decision.correction not in CORRECTIONS:
        raise UserError(f"{path}: correction = {decision.correction!r}; pick from {', '.join(CORRECTIONS)}")
    if not 0 < decision.alpha < 1 or not 0 < decision.level < 1:
        raise UserError(
            f"{path}: alpha and level lie between 0 and 1, got {decision.alpha}, {decision.level}"
        )
    return Plan(plan.setup, decision, plan.planned, cells, plan.tuning, str(path))


def _with_tuning(cells: tuple[Cell, ...], tuning: dict, tunes: list[dict]) -> tuple[Cell, ...]:
    """The tuning trials as cells of stage "tuning" (each [[tune]] entry at each LR scale, ``trial_seeds``
    seeds), placed before the first cell that reads their outcome (stage "one-point"), else at the end."""
    trials = tuple(
        Cell(
            "tuning",
            tuple(t["arms"].split()),
            int(tuning["trial_seeds"]),
            float(t["ratio"]),
            t["lr_rule"],
            float(tuning["holdout"]),
            int(tuning["holdout_seed"]),
            float(scale),
        )  # fmt: skip
        for t in tunes
        for scale in tuning["lr_scales"]
    )
    at = next((i for i, c in enumerate(cells) if c.stage == "one-point"), len(cells))
    return cells[:at] + trials + cells[at:]


def tuned_key(arm: str, ratio: float | None, rule: str | None) -> tuple:
    """How tuning names an arm's set-up: (arm, share, LR rule). Small-batch SGD's share and rule are None: it
    trains at the recipe's own batch, so neither moves its LR (its trials answer any of them)."""
    return (arm, None, None) if arm == BASELINE_ARM else (arm, ratio, rule)


def held_out_scores(trials: list[dict]) -> dict[tuple, dict[float, list[float]]]:
    """`tuned_key` -> LR scale -> final held-out top-1 of each trial run."""
    found: dict[tuple, dict[float, list[float]]] = {}
    for key, row in ((key_of(r), r) for r in trials):
        if key and key.holdout:
            last = row["top1_per_epoch"][-1] if row["top1_per_epoch"] else None
            found.setdefault(tuned_key(key.arm, key.ratio, key.lr_rule), {}).setdefault(
                key.lr_scale, []
            ).append(math.nan if last is None else float(last))
    return found


def chosen_scale(by_scale: dict[float, list[float]], plan: Plan) -> float | None:
    """The plan's rule: the LR scale with the best mean held-out top-1 (ties: the scale nearest 1), once every
    scale has its trial seeds; None before. A diverged trial (NaN) makes its scale lose."""
    scales, seeds = plan.tuning["lr_scales"], plan.tuning["trial_seeds"]
    if any(len(by_scale.get(k, [])) < seeds for k in scales):
        return None
    means = {k: statistics.fmean(by_scale[k][:seeds]) for k in scales}
    means = {k: -math.inf if math.isnan(v) else v for k, v in means.items()}
    best = max(means.values())
    return min((k for k in scales if means[k] == best), key=lambda k: abs(k - 1))


def scale_for(plan: Plan, trials: list[dict], arm: str, ratio: float, rule: str) -> float:
    by_scale = held_out_scores(trials).get(tuned_key(arm, ratio, rule), {})
    scale = chosen_scale(by_scale, plan)
    if scale is None:
        done = sum(len(v) for v in by_scale.values())
        raise UserError(
            f"{arm} at {ratio:g} ({rule} rule) has {done} of its tuning trials: run STAGES=tuning first"
        )
    return scale


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("plan", type=Path, nargs="?", default=DEFAULT_PLAN)
    parser.add_argument("--stages", nargs="*", default=None, help="only these stages' cells")
    parser.add_argument("--setup", action="store_true", help="print the set-up's bench options only")
    parser.add_argument(
        "--scale-for", nargs=3, metavar=("ARM", "RATIO", "RULE"), help="print the LR scale the trials chose"
    )
    parser.add_argument(
        "--tuning-runs", type=Path, default=None, help="the tuning trials' rows (--scale-for)"
    )
    args = parser.parse_args(argv)
    try:
        plan = load(args.plan)
        if args.scale_for:
            arm, ratio, rule = args.scale_for
            trials = [json.loads(line) for line in args.tuning_runs.read_text().splitlines() if line.strip()]
            print(f"{scale_for(plan, trials, arm, float(ratio), rule):g}")
            return
    except (UserError, OSError, AttributeError) as err:
        raise SystemExit(f"error: {err}") from None
    if args.setup:
        print(plan.setup_options())
        return
    unknown = set(args.stages or ()) - {c.stage for c in plan.cells}
    if unknown:
        stages = " ".join(dict.fromkeys(c.stage for c in plan.cells))
        raise SystemExit(f"error: no stage {' '.join(sorted(unknown))} in {args.plan}; pick from {stages}")
    for cell in plan.cells:
        if args.stages is None or cell.stage in args.stages:
            kind = (
                "tuning"
                if cell.holdout
                else f"tuned:{cell.ratio:g}:{cell.lr_rule}"
                if cell.tuned
                else "verdict"
            )
            print(f"{' '.join(cell.arms)}|{cell.seeds}|{cell.options()}|{kind}")


if __name__ == "__main__":
    main()
