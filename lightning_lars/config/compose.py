"""A command line composed in this process (the recipe card, `make check`, tests, benchmarks): Hydra's one
composition, then the rules only we know; every mistake one line, in Hydra's and OmegaConf's words where theirs."""

from __future__ import annotations

import re

from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from lightning_lars.config import rules, schema
from lightning_lars.config.jobs import compose_job
from lightning_lars.config.override_keys import check_override_keys
from lightning_lars.config.override_text import quote_plain_text
from lightning_lars.core.errors import UserError


def compose_command_line(overrides: list[str]) -> DictConfig:
    """``overrides`` composed as the entry point composes them, and checked by `lightning_lars.config.rules`."""
    overrides = [quote_plain_text(o) for o in overrides]  # data.root=/data/données
    check_override_keys(overrides)
    try:
        cfg = compose_job(overrides)
    except (HydraException, OmegaConfBaseException) as err:
        # Hydra's message and OmegaConf's reason under it, as the entry point prints them, on one line
        cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else None
        raise UserError(" ".join(f"{err} {cause or ''}".split())) from None
    rules.check(cfg)
    return cfg


def explain_instantiation_error(err: Exception) -> str:
    """One line for a `_target_` that rejected its arguments, e.g. a misspelt ``+data.foo=1`` or a Trainer
    argument Lightning's ``Trainer`` does not take."""
    text = " ".join(str(err).split())
    unexpected = re.search(r"unexpected keyword argument '([^']+)'", text)
    node = re.search(r"full_key: (\S+)", text)
    target = re.search(r"target '([^']+)'", text)
    if unexpected:
        where = f"{node.group(1)}." if node else ""
        why = f"{target.group(1) if target else 'its target'} takes no such argument; remove it or fix its spelling"
        return schema.unknown_key(f"{where}{unexpected.group(1)}", why=why)
    if isinstance(err.__cause__, UserError):
        return str(err.__cause__)
    return text
