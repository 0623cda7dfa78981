"""`make recipe-card`: what a run of a recipe will do, step by step, without data or a GPU.

    python -m lightning_lars.recipe_card goyal_8k --devices 8 --nodes 32 [--plot card.png] [key=value ...]

An entry point, not part of ``recipe``: the card shows the values the recipe's callbacks apply per step, so its
plan is made with the callbacks built (`lightning_lars.training.recipe_plan`).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from lightning_lars.config.recipes import recipe_names, unknown_recipe, user_recipe_dirs
from lightning_lars.core.errors import UserError
from lightning_lars.recipe import reference_points
from lightning_lars.recipe.card import card_text
from lightning_lars.recipe.plan import compose_recipe
from lightning_lars.training.recipe_plan import plan_composed


def show(name: str, devices: int = 1, nodes: int = 1, overrides=(), plot_path: str | None = None) -> str:
    """Recipe ``name``'s card on ``devices x nodes`` (with ``overrides``), its plot written to ``plot_path``."""
    cfg = compose_recipe(name, list(overrides))
    return card_text(cfg, plan_composed(cfg, name, devices, nodes), devices, nodes, plot_path)


def check_split_words(overrides: list[str], plot: str | None) -> None:
    """A word that is no ``key=value`` is the rest of a value split at its spaces: make hands ``args`` to the
    shell unquoted, so ``args='--plot my card.png'`` arrives as ``--plot my`` and ``card.png``."""
    stray = [word for word in overrides if "=" not in word]
    if not stray:
        return
    whole = shlex.quote(" ".join([plot, *stray]) if plot else " ".join(stray))
    option = f"--plot {whole}" if plot else whole
    raise UserError(
        f"{' '.join(stray)}: no key=value override, the rest of a value split at its spaces; make passes args"
        f' to the shell as words, so quote the value inside it: args="{option}" (a command line: {option})'
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lightning_lars.recipe_card",
        description="A recipe's card: what a run will do, without data or a GPU.",
    )
    parser.add_argument("name")
    parser.add_argument("--devices", type=int, default=1, help="devices per node (default 1)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    parser.add_argument("--plot", metavar="FILE.png", help="draw LR, weight decay and momentum, evals marked")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.max_epochs=30")
    # make puts args="--plot F" before the overrides
    args = parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    try:
        check_split_words(args.overrides, args.plot)
        known = recipe_names(user_recipe_dirs(args.overrides))  # with the user's own, on hydra.searchpath
        if args.name not in known and args.name.startswith(reference_points.RECIPE_PREFIX):
            raise reference_points.unknown_reference(args.name)
        if args.name not in known:
            raise unknown_recipe(args.name, known, ours="'{}'")
        if args.devices < 1 or args.nodes < 1:
            raise UserError(f"--devices {args.devices} --nodes {args.nodes}: both must be at least 1")
        print(show(args.name, args.devices, args.nodes, args.overrides, args.plot))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
