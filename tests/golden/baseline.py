"""Behaviour held fixed across a refactor: every recipe's ``--cfg job`` and the demo's first printed losses.

    python tests/golden/baseline.py save     # before a refactor: writes tests/golden/configs/*.yaml, demo_losses.txt
    python tests/golden/baseline.py check    # after it: the same configs (``_target_`` paths mapped through MOVED)
                                             # and the same 20 losses to the printed digits (4 decimals)

A config is composed in this process as the entry point composes it (the text ``--cfg job`` prints, in a
second instead of a process a recipe). The losses are ``make demo``'s command for its first 20 steps, each
printed (``trainer.log_every_n_steps=1``), on the demo data (``make demo-data``, or ``$LARS_DATA_DIR``): under
a minute on 2 cores. tests/unit/test_golden_baseline.py runs both checks in ``make test``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for the shared test helpers when this runs as a script
from helpers import ROOT, run  # noqa: E402

CONFIGS = HERE / "configs"
LOSSES = HERE / "demo_losses.txt"
NUM_LOSSES = 20
LOSS_LINE = re.compile(r"^\[train\] .* step (\d+)/\d+ .*\| loss ([0-9.]+) \|", re.M)

# Old `_target_` (and other dotted code paths) -> where the code lives now. A refactor that moves a class or
# function adds its line here; the saved configs stay as they were recorded.
# Old -> new code paths, for a refactor that moves code: fill it before the move, check after, then re-save and
# empty it. Emptied once the layers refactor was checked; the configs were then re-saved with this round's
# intended changes (the mlperf block and its callback, model.compile defaults, the optimizers' implementation).
MOVED: dict[str, str] = {}


def recipe_names() -> list[str]:
    return sorted(p.stem for p in (HERE / "configs").glob("*.yaml")) or sorted(
        p.stem for p in (ROOT / "recipes").glob("*.yaml")
    )


def job_config(recipe: str) -> str:
    """What ``lightning-lars recipe=NAME --cfg job`` prints."""
    from omegaconf import OmegaConf

    from lightning_lars.config.jobs import compose_job

    return OmegaConf.to_yaml(compose_job([f"recipe={recipe}"]))


def mapped(text: str) -> str:
    """``text`` with every old code path replaced by its new one, in one pass (longest first: a module before
    its parent; a new path is never rewritten again)."""
    if not MOVED:
        return text
    pattern = "|".join(re.escape(old) for old in sorted(MOVED, key=len, reverse=True))
    return re.sub(rf"(?<![\w.])({pattern})(?![\w])", lambda m: MOVED[m.group(1)], text)


def demo_losses(log_dir: Path | None = None) -> list[tuple[int, str]]:
    """The demo's first NUM_LOSSES steps, each printed; its run folder under ``log_dir`` (default: logs/)."""
    where = [f"paths.log_dir={log_dir}"] if log_dir else []
    demo = ["recipe=demo", "trainer.log_every_n_steps=1", f"+trainer.max_steps={NUM_LOSSES}", "~logger"]
    done = run([sys.executable, "-m", "lightning_lars.train", *demo, *where])
    if done.returncode != 0:
        raise SystemExit(f"make demo's command failed: {done.stderr.strip()[-2000:]}")
    return [(int(step), loss) for step, loss in LOSS_LINE.findall(done.stdout + done.stderr)][:NUM_LOSSES]


def save(with_losses: bool) -> None:
    CONFIGS.mkdir(parents=True, exist_ok=True)
    names = recipe_names()
    for name in names:
        (CONFIGS / f"{name}.yaml").write_text(job_config(name))
    print(f"saved {len(names)} configs in {CONFIGS}")
    if with_losses:
        losses = demo_losses()
        LOSSES.write_text("".join(f"{step} {loss}\n" for step, loss in losses))
        print(f"saved {len(losses)} losses in {LOSSES}")


def config_differences(names: list[str] | None = None) -> list[str]:
    """One line per recipe whose ``--cfg job`` differs from the saved one (after mapping moved paths)."""
    names = names or recipe_names()
    now = {name: job_config(name) for name in names}
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
