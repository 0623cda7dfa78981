"""The README's "Runs of ours": its table, verdict lines and plot, rendered from a runs file: by default
``recipes/runs.jsonl``, the first set-up's and ``make bench-largebatch``'s own file (the fair set-up's,
``recipes/runs-fair.jsonl``, has a plan and is rendered by ``fair_report``, which uses the table from here).

Two kinds of line live in that file: one per training run of ``benchmarks/bench_largebatch.py`` (``kind``
``bench-largebatch``: recipe, overrides, data set, seed, top-1 per epoch, wall time, machine, date, commit),
and one per ``make check`` (``lightning_lars/check.py``: already a summary over its seeds). Bench runs are
grouped by arm, data set, large-batch ratio and epochs; each group is one table row with mean +- std over
seeds and its gap to small-batch SGD on the same data, with a 95 % Welch interval over the seeds.

    python -m lightning_lars.report.runs_table [--runs FILE]        # prints the section
    python -m lightning_lars.report.runs_table [--runs FILE] --readme README.md [--plot docs/runs.png]
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from lightning_lars.core.errors import UserError
from lightning_lars.report.bench_key import (
    BASELINE_ARM,
    DEFAULT_LR_RULE,
    DEFAULT_WIDTH,
    TUNED_SCALE,
    RunKey,
    baseline_part,
    key_of,
    setup_label,
    setup_of,
)
from lightning_lars.report.claims import AGAINST, claim_of, judge
from lightning_lars.report.runs_file import final_top1, read_runs
from lightning_lars.report.runs_plot import plot_groups
from lightning_lars.report.seed_stats import welch_gap

BEGIN, END = "<!-- runs-of-ours:begin -->", "<!-- runs-of-ours:end -->"
COLUMNS = (
    "run",
    "data set",
    "batch",
    "epochs",
    "top-1 % (mean +- std, n)",
    "per seed",
    "gap to small-batch SGD",
    "wall per run",
    "machine",
    "date",
    "commit or log",
)


def data_label(dataset: dict, setup: RunKey, with_ratio: bool) -> str:
    """``tin10 #1c14ff06 (5000/500 img, 10 classes, 32 px), ratio 0.1, full width``: the data set and factors."""
    mark = f" #{setup.data_hash[:8]}" if setup.data_hash else ""
    text = f"{setup.dataset}{mark} ({dataset['train']}/{dataset['val']} img, {dataset['classes']} classes,"
    text += f" {setup.resolution} px)" + (f", ratio {setup.ratio:g}" if with_ratio else "")
    text += "" if setup.width == DEFAULT_WIDTH else f", {setup.width} width"
    text += "" if not with_ratio or setup.lr_rule == DEFAULT_LR_RULE else f", {setup.lr_rule} LR"
    return text + ("" if setup.lr_scale == 1.0 else f" x{setup.lr_scale:g}")


def groups(rows: list[dict], held_out: bool = False) -> dict[RunKey, dict[str, list[dict]]]:
    """set-up -> arm -> runs; small-batch SGD joins every ratio and LR rule of its data set and sizes. Only the
    runs evaluated on the validation images, or with ``held_out`` only those evaluated on held-out training
    images (tuning trials, the set-up's check): never both in one table, and never a held-out run in a verdict."""
    found: dict[RunKey, dict[str, list[dict]]] = {}
    base: dict[RunKey, list[dict]] = {}
    for key, row in ((key_of(r), r) for r in rows):
        if key and bool(key.holdout) != held_out:
            continue
        if key and key.arm == BASELINE_ARM:
            base.setdefault(baseline_part(setup_of(key)), []).append(row)
        elif key:
            found.setdefault(setup_of(key), {}).setdefault(key.arm, []).append(row)
    for part, runs in base.items():
        setups = [k for k in found if baseline_part(k) == part]
        for k in setups or [setup_of(key_of(runs[0]))]:
            found[k] = {BASELINE_ARM: runs, **found.get(k, {})}
    return dict(sorted(found.items(), key=lambda item: tuple(map(str, item[0]))))


def finals(runs: list[dict]) -> list[float]:
    """Final top-1 of the runs that did not diverge."""
    return [v for v in map(final_top1, runs) if math.isfinite(v)]


def _gap_text(runs: list[dict], base: list[dict] | None) -> str:
    if base is None or runs is base:
        return "-"
    gap = welch_gap(finals(runs), finals(base))
    if gap is None:
        return "needs >= 2 seeds each"
    diff, lo, hi = gap
    return f"{diff:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def claim_line(setup: RunKey, arm: str, runs: list[dict], against: list[dict] | None) -> str:
    """The published claim ``arm`` stands for, at ``setup``, and whether it holds here against the runs of the arm
    the claim is measured from (``claims.judge``)."""
    claim = claim_of(arm)
    head = f"{claim.name} at {100 * setup.ratio:g} % of the data ({setup_label(setup)}; batch {runs[0]['batch']})"
    if against is None:
        other = AGAINST.get(claim.against, claim.against)
        return f"{head}: no runs of {other} to compare with (run only={claim.against})"
    a = finals(runs)
    diverged = f", {len(runs) - len(a)} of {len(runs)} seeds diverged" if len(a) < len(runs) else ""
    return f"{head}: {judge(claim, a, finals(against))}{diverged}"


def _against(found: dict[RunKey, dict[str, list[dict]]], setup: RunKey, arm: str) -> list[dict] | None:
    """The runs ``arm``'s claim is measured from: small-batch SGD of the set-up, or SGD at the same batch (of the
    set-up, else of the same set-up under Goyal's own linear LR rule, the one that arm trains with)."""
    wanted = claim_of(arm).against
    if wanted == BASELINE_ARM or wanted in found[setup]:
        return found[setup].get(wanted)
    return found.get(setup._replace(lr_rule=DEFAULT_LR_RULE), {}).get(wanted)


def verdicts(rows: list[dict]) -> str:
    """One line per large-batch arm and set-up: the claim it tests, its gap, the verdict."""
    found = groups(rows)
    return "\n".join(
        claim_line(setup, arm, runs, _against(found, setup, arm))
        for setup, arms in found.items()
        for arm, runs in arms.items()
        if arm != BASELINE_ARM
    )


def table_rows(rows: list[dict]) -> list[dict]:
    out, shown = [], set()
    for setup, arms in groups(rows).items():
        base = arms.get(BASELINE_ARM)
        for arm, runs in arms.items():
            if arm == BASELINE_ARM and baseline_part(setup) in shown:
                continue  # one row for the baseline, whatever ratios and LR rules it is compared at
            shown.add(baseline_part(setup))
            every = [final_top1(r) for r in runs]
            finite = finals(runs)
            std = f"{statistics.stdev(finite):.2f}" if len(finite) > 1 else "-"
            mean = f"{statistics.fmean(finite):.2f} +- {std}, n={len(finite)}" if finite else "diverged"
            out.append(
                {
                    "run": f"{arm} ({runs[0]['recipe']})" + _tuned_text(runs[0]),
                    "data set": data_label(runs[0]["dataset"], setup, with_ratio=arm != BASELINE_ARM),
                    "batch": runs[0]["batch"],
                    "epochs": setup.epochs,
                    "top-1 % (mean +- std, n)": mean,
                    "per seed": " ".join("nan" if not math.isfinite(v) else f"{v:.1f}" for v in every),
                    "gap to small-batch SGD": _gap_text(runs, base),
                    "wall per run": f"{statistics.fmean(r['wall_s'] for r in runs) / 60:.1f} min",
                    "machine": runs[0]["machine"],
                    "date": max(r["date"] for r in runs),
                    "commit or log": ", ".join(sorted({r["commit"] for r in runs})),
                }
            )
    for row in rows:  # make check's summary lines (lightning_lars/check.py)
        if row.get("kind") is None and "top-1 (mean +- std, n)" in row:
            out.append(
                {
                    "run": f"make check {row.get('recipe', '?')}",
                    "data set": "the recipe's",
                    "batch": "-",
                    "epochs": row.get("epochs", "-"),
                    "top-1 % (mean +- std, n)": row["top-1 (mean +- std, n)"],
                    "per seed": "-",
                    "gap to small-batch SGD": "-",
                    "wall per run": row.get("time", "-"),
                    "machine": row.get("hardware", "-"),
                    "date": row.get("date", "-"),
                    "commit or log": row.get("log or W&B run", "-"),
                }
            )
    return out


def _tuned_text(row: dict) -> str:
    """A row the fair report read at its arm's chosen LR scale (``verdict_rows``) says so."""
    scale = row.get("factors", {}).get(TUNED_SCALE)
    return "" if scale is None else f", LR x{scale:g} tuned"


def markdown(rows: list[dict]) -> str:
    cell = lambda v: str(v).replace("|", "/")  # noqa: E731  one markdown table cell
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(
        lines + ["| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in table_rows(rows)]
    )


def plot(rows: list[dict], path: Path) -> Path | None:
    """Top-1 per epoch per arm (mean over seeds, band = its 95 % interval), one panel per set-up."""
    return plot_groups({setup_label(k): arms for k, arms in groups(rows).items()}, path)


def section(rows: list[dict], plot_ref: str | None) -> str:
    parts = [markdown(rows)]
    if plot_ref:
        parts.append(f"![top-1 per epoch per arm]({plot_ref})")
    text = verdicts(rows)
    if text:
        parts.append(
            "Verdicts (gap of final top-1 to small-batch SGD, or to the arm a line names; 95 % Welch CI over"
            " seeds):\n\n" + "\n".join(f"- {line}" for line in text.splitlines())
        )
    return "\n\n".join(parts)


def update_readme(
    readme: Path,
    rows: list[dict],
    plot_path: Path | None,
    markers=(BEGIN, END),
    render=None,
    what="Runs of ours",
) -> None:
    """Rewrite the text between the ``markers`` lines of ``readme`` with ``render(rows, plot_ref)`` (the table,
    plot and verdicts of ``section`` unless given); nothing else is touched, nothing when the markers are wrong."""
    begin, end = markers
    text = Path(readme).read_text()
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise UserError(f"{readme} needs one '{begin}' line and one '{end}' line after it around '{what}'")
    ref = None
    if plot_path and plot(rows, plot_path):
        ref = Path(plot_path).resolve().relative_to(Path(readme).resolve().parent).as_posix()
    head, rest = text.split(begin)
    Path(readme).write_text(f"{head}{begin}\n{(render or section)(rows, ref)}\n{end}{rest.split(end)[1]}")


def main(argv: list[str] | None = None) -> None:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, default=root / "recipes" / "runs.jsonl")
    parser.add_argument(
        "--readme", type=Path, default=None, help="rewrite its 'Runs of ours' (default: print)"
    )
    parser.add_argument("--plot", type=Path, default=root / "docs" / "runs.png", help="with --readme")
    args = parser.parse_args(argv)
    if args.runs.name == "runs-fair.jsonl":  # its verdicts follow a plan: n, correction, scope
        raise SystemExit(
            f"error: {args.runs} has a plan: render it with python -m lightning_lars.report.fair_report"
        )
    try:
        rows = read_runs(args.runs, required=True)
        if args.readme is None:
            print(section(rows, None))
            return
        update_readme(args.readme, rows, args.plot)
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"{args.readme}: 'Runs of ours' rewritten from {args.runs}")


if __name__ == "__main__":
    main()
