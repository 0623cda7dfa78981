"""What resuming a checkpoint with a config other than its run's does: one line for the user who named the file
(`lightning_lars.runtime.resume` resumes it as asked)."""

from __future__ import annotations

from pathlib import Path

# Keys whose change re-plans what a step means: the schedule and the epochs are functions of the global step
PLAN_KEYS = ("batch.global_size", "epoch_length.", "scheduler.", "evaluation.", "trainer.max_")


def shown(differs: list[str]) -> str:
    """The first four of `lightning_lars.runtime.resume.config_differences`'s ``key (then -> now)``, and a count."""
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
