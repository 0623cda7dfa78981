"""The factor study of "Runs of ours": from one set-up of ``benchmarks/bench_largebatch.py`` (the base), one
factor changed at a time; one table row per factor level and arm (n, mean top-1, gap to small-batch SGD with its
95 % Welch interval, and how far the gap moved from the base's, with Welch's interval and Satterthwaite's degrees
of freedom over the four groups of runs, two where the level shares the base's small-batch runs) and one
verdict line per large-batch arm.

    python -m lightning_lars.report.factor_study [--runs recipes/runs-factor.jsonl] [--readme README.md]
    python -m lightning_lars.report.factor_study --runs recipes/runs-factor-heldout.jsonl --readme README.md \
        --section factor-study-heldout --plot '' --held-out    # held-out images (plan-fair.toml stage 6)
"""

from __future__ import annotations

import argparse
import functools
import statistics
from pathlib import Path

from lightning_lars.core.errors import UserError
from lightning_lars.report import runs_file, runs_table
from lightning_lars.report.bench_key import BASELINE_ARM, RunKey, baseline_part, key_of
from lightning_lars.report.seed_stats import welch_contrast, welch_gap

# Today's set-up, from which each cell changes one factor (README, "Runs of ours"): ratio, epochs, px, width, rule
BASE = {"ratio": 0.1, "epochs": 8, "resolution": 32, "width": "quarter", "lr_rule": "linear"}
FACTOR_NAMES = {
    "ratio": "ratio",
    "epochs": "epochs",
    "resolution": "px",
    "width": "width",
    "lr_rule": "LR rule",
}
COLUMNS = (
    "factor level",
    "arm",
    "batch",
    "n",
    "top-1 % (mean +- std)",
    "gap to sgd_small [95 % CI]",
    "gap moved [95 % CI]",
)
BASE_LEVEL = "today's set-up"
SECTION = "factor-study"  # the README's block: between "<!-- NAME:begin -->" and "<!-- NAME:end -->"


def markers(name: str = SECTION) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


BEGIN, END = markers()


def level(setup: RunKey, base: dict = BASE) -> str:
    """The factors in which ``setup`` differs from ``base``, in words ("today's set-up" when none)."""
    changed = [f"{FACTOR_NAMES[f]} {getattr(setup, f):g}" if f == "ratio" else f"{FACTOR_NAMES[f]} {getattr(setup, f)}"
               for f in FACTOR_NAMES if getattr(setup, f) != base[f]]  # fmt: skip
    return ", ".join(changed) or BASE_LEVEL


def _gap(runs: list[dict], base: list[dict] | None):
    return None if base is None else welch_gap(runs_table.finals(runs), runs_table.finals(base))


def _moved(arm: list[dict], small: list[dict], arm_today: list[dict], small_today: list[dict]):
    """How far this level moved the arm's gap from today's: (arm - small) - (arm_today - small_today), with its
    95 % interval; where the level shares today's small-batch runs (ratio, LR rule) that is arm - arm_today."""
    if small is small_today:
        return welch_contrast([runs_table.finals(arm)], [runs_table.finals(arm_today)])
    plus, minus = [arm, small_today], [small, arm_today]
    return welch_contrast([runs_table.finals(r) for r in plus], [runs_table.finals(r) for r in minus])


def _gap_text(gap) -> str:
    return "needs >= 2 seeds each" if gap is None else f"{gap[0]:+.1f} [{gap[1]:+.1f}, {gap[2]:+.1f}]"


def rows(runs: list[dict], base: dict = BASE, held_out: bool = False) -> list[dict]:
    """One row per factor level and arm; small-batch SGD once per level that changes it. ``held_out``: the runs
    evaluated on held-out training images instead of the validation images (``runs_table.groups``)."""
    found = runs_table.groups(runs, held_out)
    today = {  # (data set, hash) -> the base set-up's arms, to say how far each level moved each gap
        (setup.dataset, setup.data_hash): arms
        for setup, arms in found.items()
        if level(setup, base) == BASE_LEVEL
    }
    out, shown = [], set()
    for setup, arms in sorted(found.items(), key=lambda item: level(item[0], base) != BASE_LEVEL):
        for arm, arm_runs in arms.items():
            if arm == BASELINE_ARM:
                if baseline_part(setup) in shown:
                    continue  # the ratio and the large-batch LR rule do not change small-batch SGD
                shown.add(baseline_part(setup))
            values = runs_table.finals(arm_runs)
            lost = len(arm_runs) - len(values)
            std = f" +- {statistics.stdev(values):.1f}" if len(values) > 1 else ""
            gap = None if arm == BASELINE_ARM else _gap(arm_runs, arms.get(BASELINE_ARM))
            was = today.get((setup.dataset, setup.data_hash), {})
            moved = None
            if gap is not None and arm in was and BASELINE_ARM in was and level(setup, base) != BASE_LEVEL:
                moved = _moved(arm_runs, arms[BASELINE_ARM], was[arm], was[BASELINE_ARM])
            out.append(
                {
                    "factor level": level(setup, base),
                    "arm": arm,
                    "batch": arm_runs[0]["batch"],
                    "n": f"{len(values)}" + (f" ({lost} diverged)" if lost else ""),
                    "top-1 % (mean +- std)": f"{statistics.fmean(values):.1f}{std}" if values else "diverged",
                    "gap to sgd_small [95 % CI]": "-" if arm == BASELINE_ARM else _gap_text(gap),
                    "gap moved [95 % CI]": "-" if moved is None else _gap_text(moved),
                }
            )
    return out


def markdown(runs: list[dict], base: dict = BASE, held_out: bool = False) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    body = ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows(runs, base, held_out)]
    return "\n".join(lines + body)


def section(runs: list[dict], plot_ref: str | None, held_out: bool = False) -> str:
    parts = [markdown(runs, held_out=held_out)]
    if plot_ref:
        parts.append(f"![top-1 per epoch per arm, one panel per cell of the factor study]({plot_ref})")
    text = runs_table.verdicts(runs)
    if text:
        parts.append(
            "Each cell against the claim (the large batch ends no more than 3 points below small-batch SGD at the"
            " same epochs; 95 % Welch CI over seeds). The cells' seeds are sized to find what moves the gap, the"
            ' column above, not to decide the claim: the verdicts that do are those of "Runs of ours", on the'
            " fair set-up this study points to. These lines are exploratory: each is read at 95 % alone, with no"
            ' correction for the number of lines (Holm\'s, as in "Runs of ours", would decide no more of them):\n\n'
            + "\n".join(f"- {line}" for line in text.splitlines())
        )
    return "\n\n".join(parts)


def update_readme(
    readme: Path, runs: list[dict], plot_path: Path | None, name: str = SECTION, held_out: bool = False
) -> None:
    """Rewrite the text between ``markers(name)`` in ``readme``; nothing else is touched."""
    render = functools.partial(section, held_out=held_out)
    runs_table.update_readme(readme, runs, plot_path, markers(name), render, "the factor study")


def check_evaluation_set(runs: list[dict], held_out: bool, path: Path) -> None:
    """A runs file whose bench runs were all evaluated on the other set would render an empty table: one line
    naming the option that reads them, before the README is touched."""
    keys = [key for key in map(key_of, runs) if key]
    if keys and not any(bool(key.holdout) == held_out for key in keys):
        where, fix = (
            ("the validation images", "leave out --held-out")
            if held_out
            else ("held-out training images", "add --held-out")
        )
        raise UserError(f"{path}: its {len(keys)} runs were all evaluated on {where}: {fix} to read them")


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, default=root / "recipes" / "runs-factor.jsonl")
    parser.add_argument("--readme", type=Path, default=None, help="rewrite its factor-study section")
    parser.add_argument(
        "--plot", type=lambda text: Path(text) if text else None, default=root / "docs" / "factor-study.png",
        help="'': none",
    )  # fmt: skip
    parser.add_argument("--section", default=SECTION, help="the README block's marker name")
    parser.add_argument(
        "--held-out", action="store_true", help="the runs evaluated on held-out training images"
    )
    args = parser.parse_args(argv)
    try:
        runs = runs_file.read_runs(args.runs, required=True)
        check_evaluation_set(runs, args.held_out, args.runs)
        if args.readme:
            update_readme(args.readme, runs, args.plot, args.section, args.held_out)
            print(f"{args.readme}: factor study rewritten from {args.runs}")
        else:
            print(section(runs, None, args.held_out))
    except UserError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
