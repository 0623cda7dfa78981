"""`make recipes`: every recipe with its published result; `--markdown` writes recipes/README.md's table."""

from __future__ import annotations

import argparse
import sys

import yaml

from lightning_lars.config import RECIPES_DIR, recipe_names

COLUMNS = ("recipe", "top1", "time", "global_batch", "epochs", "hardware", "source")
HEADER = """# Recipes

One file per published record run. Each opens with its claim and source, and every hyperparameter cites
where it comes from (or says it is our choice, and why). Run one with `make recipe=NAME`; at toy scale on a
CPU with `make recipe=NAME debug=toy`.

This table is generated from the recipes' `published:` blocks by `python -m lightning_lars.recipes --markdown`
(a test keeps it in sync). It lists what the papers reported, not runs of ours.

"""


def published(name: str) -> dict:
    text = (RECIPES_DIR / f"{name}.yaml").read_text()
    return yaml.safe_load(text).get("published") or {}


def rows() -> list[dict]:
    return [{"recipe": name, **{k: published(name).get(k, "?") for k in COLUMNS[1:]}} for name in recipe_names()]


def markdown() -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows()]
    return HEADER + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="print recipes/README.md")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
        return
    table = rows()
    widths = {c: max(len(c), *(len(str(r[c])) for r in table)) for c in COLUMNS[:-1]}
    print("  ".join(f"{c:{widths[c]}}" for c in COLUMNS[:-1]))
    for r in table:
        print("  ".join(f"{r[c]!s:{widths[c]}}" for c in COLUMNS[:-1]))
    print("\nrun one: make recipe=NAME   (toy scale on CPU: make recipe=NAME debug=toy)")


if __name__ == "__main__":
    main()
