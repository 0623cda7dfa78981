"""The usage screen of ``lightning-lars --help`` (and ``python -m lightning_lars.train --help``): what to type,
printed before Hydra, the configs or torch are loaded. Hydra's own help stays at ``--hydra-help``."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from lightning_lars.config.paths import CONF_DIR, PROJECT_ROOT, RECIPES_DIR, is_checkout
from lightning_lars.core.stdout import print_to_reader

# (override, what it does): the keys a first run changes; each is one the config takes (tests/unit checks)
COMMON_KEYS = (
    ("debug=toy", "any recipe at toy scale on the demo's images, in seconds on a CPU"),
    ("data=NAME data.root=DIR", "the data: {data}; imagefolder reads DIR/{{train,val}}/<class>/<image>"),
    ("paths.data_dir=DIR", "where prepared .beton files are (or $LARS_DATA_DIR)"),
    ("paths.log_dir=DIR", "where run folders go: <log_dir>/<recipe>/runs/<date>/"),
    ("trainer.devices=G trainer.num_nodes=N", "devices per node and nodes (make: devices=G nodes=N)"),
    ("batch.global_size=B batch.max_per_device=M", "images per step, and per forward pass (accumulates)"),
    ("trainer.max_steps=S", "stop after S optimizer steps (the schedule stays the recipe's)"),
    ("run.ckpt_path=last", "resume the newest run of this config (or run.ckpt_path=FILE)"),
    ("seed=N", "the run's seed"),
    ("~logger", "no W&B (default: W&B, online with an account, else offline)"),
)

FLAGS = (
    ("--cfg job", "print the composed config, run nothing"),
    ("-m key=a,b", "a sweep, one run per value (make: multirun=1)"),
    ("--hydra-help", "Hydra's own help"),
)


def _names(folder: Path) -> str:
    return ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))


def text() -> str:
    program = "make recipe=NAME" if is_checkout() else "lightning-lars recipe=NAME"
    width = max(len(key) for key, _ in COMMON_KEYS + FLAGS) + 2
    docs = [RECIPES_DIR / "README.md"]
    if is_checkout():
        docs.insert(0, PROJECT_ROOT / "README.md")
    lines = [
        "usage: lightning-lars recipe=NAME [key=value ...] [--cfg job]",
        f"       (the same: python -m lightning_lars.train ...; in a clone: {program} key=value ...)",
        "",
        "Trains one published large-batch ImageNet run (a recipe) with Lightning; key=value are Hydra overrides.",
        "",
        *textwrap.wrap(f"recipes: {_names(RECIPES_DIR)}", 110, subsequent_indent="  "),
        "  make recipes                 every recipe with its published result",
        "  make recipe-card recipe=NAME what a run of it will do, step by step (no data, no GPU)",
        "",
        "common keys:",
        *(f"  {key:<{width}}{what.format(data=_names(CONF_DIR / 'data'))}" for key, what in COMMON_KEYS),
        "",
        "config groups (GROUP=OPTION):",
        *(
            line
            for group in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra")
            for line in textwrap.wrap(
                f"{group.name}: {_names(group)}", 108, initial_indent="  ", subsequent_indent="    "
            )
        ),
        "",
        "flags:",
        *(f"  {flag:<{width}}{what}" for flag, what in FLAGS),
        "",
        "first run: make demo (or: python -m lightning_lars.data.demo --out data/demo;"
        " lightning-lars recipe=demo debug=toy)",
        f"docs: {', '.join(map(str, docs))}",
    ]
    return "\n".join(lines)


def exit_if_asked(argv: list[str]) -> None:
    """Print the usage screen and exit 0 when ``argv`` asks for help."""
    if {"--help", "-h"} & set(argv):
        print_to_reader(text())  # `lightning-lars --help | head`: no BrokenPipeError traceback
        sys.exit(0)
