"""A ``trainer.KEY=value`` judged against Lightning's Trainer arguments (`lightning_lars.config.trainer_signature`):
whether the value is of a kind the argument takes, what to write instead, and the nearest real argument."""

from __future__ import annotations

import difflib

from lightning_lars.config import schema
from lightning_lars.config.trainer_signature import ANYTHING, TRAINER_ARGUMENTS


def accepts(accepted: tuple | str, value) -> bool:
    """Whether ``value`` (as Hydra parsed it) is one the table entry ``accepted`` names. A bool is not an int
    here (Python's ``isinstance(True, int)``), and a literal matches only its own type (``32`` is not ``"32"``)."""
    if accepted == ANYTHING:
        return True
    for allowed in accepted:
        if isinstance(allowed, type):
            if isinstance(value, allowed) and (allowed is bool or not isinstance(value, bool)):
                return True
        elif type(value) is type(allowed) and value == allowed:
            return True
    return False


def describe(accepted: tuple | str) -> str:
    """``an integer or null``, ``true or false or 'warn'``: what a user may write, in `schema.describe`'s words."""
    if accepted == ANYTHING:
        return "anything"
    return " or ".join(
        "null" if a is None else schema.describe(a) if isinstance(a, type) else repr(a) for a in accepted
    )


def unknown_argument(name: str) -> str:
    """The one-line error for ``trainer.<name>``, with the nearest real argument (``max_step``: ``max_steps``)."""
    nearest = difflib.get_close_matches(name, TRAINER_ARGUMENTS, n=1)
    hint = f"did you mean trainer.{nearest[0]}?" if nearest else "remove it or fix its spelling"
    return schema.unknown_key(f"trainer.{name}", why=f"Lightning's Trainer takes no such argument; {hint}")
