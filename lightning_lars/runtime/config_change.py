"""A run's config against an earlier run's: the keys that differ (resolved values included) and, for the user
who named a checkpoint of a run with another config, one line on what resuming it does
(`lightning_lars.runtime.resume` resumes it as asked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lightning_lars.core.atomic_files import write_text_atomic

# Config keys that may change between a run and its resume: how to resume, log and show progress, and the
# loader's worker count. Everything else (model, data, schedule, batch, ...) must match for `last`.
IGNORED_KEYS = ("run.", "logger.", "callbacks.progress.", "data.num_workers")
# Beside .hydra/: the run's config with every ${...} resolved (environment variables, the checkout's path).
RESOLVED_FILE = "resolved_config.yaml"
# Keys whose change re-plans what a step means: the schedule and the epochs are functions of the global step
PLAN_KEYS = ("batch.global_size", "epoch_length.", "scheduler.", "evaluation.", "trainer.max_")


def shown(differs: list[str]) -> str:
    """The first four of `config_differences`'s ``key (then -> now)``, and a count."""
    return "; ".join(differs[:4]) + (f"; and {len(differs) - 4} more" if len(differs) > 4 else "")


def notice(path: Path, step: int, differs: list[str]) -> str:
    """One line: the checkpoint's step, the keys that differ from its run's config and what that does."""
    effects = []
    if any(d.startswith(PLAN_KEYS) for d in differs):
        effects.append(
            f"the LR schedule, the epoch count and the evaluation steps are planned for this config and"
            f" continue from step {step}, which now falls at another point of them (the checkpoint holds no"
            " schedule: the step alone sets the LR)"
        )
    if any(d.startswith(("batch.", "data.")) for d in differs):
        effects.append(
            "the loader continues its epoch after the images it had consumed (FFCV's and the image folder's"
            " alike), in the batches of this config"
        )
    what = "; ".join(effects) or "the rest of the run follows this config"
    return (
        f"run.ckpt_path={path}: resuming step {step} of a run whose config differs: {shown(differs)}; {what};"
        " to continue that run unchanged, give its values (its .hydra/overrides.yaml)"
    )


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def config_differences(current: dict, saved: dict, run_folders: tuple[Path, ...] = ()) -> list[str]:
    """``key (saved -> current)`` for every key that differs, leaving out `IGNORED_KEYS` and, in resolved
    configs, values that name one of ``run_folders`` (output and checkpoint dirs: each run has its own)."""
    now, then = _flat(current), _flat(saved)
    folders = tuple(str(f) for f in run_folders)

    def per_run(value: Any) -> bool:
        return bool(folders) and isinstance(value, str) and any(f in value for f in folders)

    keys = sorted(
        k
        for k in set(now) | set(then)
        if not k.startswith(IGNORED_KEYS)
        and now.get(k) != then.get(k)
        and not (per_run(now.get(k)) or per_run(then.get(k)))
    )
    return [f"{k} ({then.get(k, 'unset')} -> {now.get(k, 'unset')})" for k in keys]


def saved_config(run_folder: Path, name: str = ".hydra/config.yaml") -> dict | None:
    """The config a run folder was made with (Hydra's ``.hydra/config.yaml``, or `RESOLVED_FILE`), or None."""
    try:
        return yaml.safe_load((run_folder / name).read_text())
    except (OSError, yaml.YAMLError):
        return None


def resolved_values(cfg: DictConfig) -> dict | None:
    """The config with every ``${...}`` resolved; None where a value cannot be resolved here."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # epoch_length.mode: an Enum
    except OmegaConfBaseException:  # unresolvable here: only the unresolved config compares
        return None


def write_resolved_config(cfg: DictConfig) -> None:
    """``<output_dir>/resolved_config.yaml``, written at the start of a run (atomically: every rank writes the
    same text): what `run.ckpt_path=last` compares beside Hydra's unresolved ``.hydra/config.yaml``."""
    values = resolved_values(cfg)
    if values is None:
        return
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / RESOLVED_FILE, yaml.safe_dump(values, sort_keys=False))


def differences_from_run(cfg: DictConfig, folder: Path, run_dir: Path) -> list[str]:
    """`config_differences` between ``cfg`` and the config of the run in ``folder`` (as Hydra wrote it, then
    resolved: the same text may name another ``$LARS_DATA_DIR``); none where the folder holds no config."""
    saved = saved_config(folder)
    if saved is None:
        return []
    differs = config_differences(OmegaConf.to_container(cfg, resolve=False, enum_to_str=True), saved)
    resolved, saved_resolved = resolved_values(cfg), saved_config(folder, RESOLVED_FILE)
    if differs or resolved is None or saved_resolved is None:
        return differs
    runs_dir = Path(cfg.paths.log_dir) / str(cfg.recipe_name) / "runs"
    return config_differences(resolved, saved_resolved, (runs_dir, run_dir, folder))
