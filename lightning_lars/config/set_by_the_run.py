"""Keys the run sets itself, whatever a config or the command line gives them: each is refused in one line that
names the key that sets it, before Hydra composes (``optimizer.lr=-0.1`` is not a key that needs a ``+``) and in
a composed config (a user's recipe)."""

from __future__ import annotations

from lightning_lars.core.errors import UserError

# A value there would be accepted and ignored (Hydra's `+` adds any key): each names the key that sets it and how
SET_BY_THE_RUN = {
    "optimizer.lr": (
        "scheduler.base_lr",
        "the schedule sets every step's LR from it (the LR at scheduler.base_batch images per step, scaled"
        " linearly to batch.global_size)",
    ),
    "data.batch_size": (
        "batch.global_size",
        "the plan splits it over devices and accumulation steps (batch.max_per_device caps a device's batch)",
    ),
    "data.seed": ("seed", "the run passes it to the data module"),
    "trainer.accumulate_grad_batches": (
        "batch.global_size",
        "the plan accumulates what it needs beyond batch.max_per_device x devices",
    ),
    "trainer.strategy": ("strategy", "strategy=NAME picks it (conf/strategy: ddp, fsdp2, ...)"),
    "trainer.callbacks": ("callbacks", "callbacks.NAME.* configures each one"),
    "trainer.logger": ("logger", "logger=wandb or ~logger for none"),
}


def set_by_the_run(key: str) -> str | None:
    """The one-line refusal of ``key`` (with or without Hydra's ``+``/``~``) when the run sets it itself."""
    key = key.lstrip("+~").partition("=")[0]
    if key not in SET_BY_THE_RUN:
        return None
    source, how = SET_BY_THE_RUN[key]
    return (
        f"{key} is not read: the run sets it from {source}; {how}; set {source} instead and leave out {key}"
    )


def check_overrides_not_set_by_the_run(overrides: list[str]) -> None:
    """Before composing: ``optimizer.lr=-0.1`` is refused for what it is, not as a key that needs a ``+``."""
    for override in overrides:
        refusal = set_by_the_run(override)
        if refusal is not None:
            raise UserError(refusal)
