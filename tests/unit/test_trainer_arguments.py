"""The table of Lightning Trainer arguments that the command line is checked against before Lightning is
imported, held equal to the installed Lightning: ``inspect.signature(lightning.pytorch.Trainer)`` is the oracle."""

from __future__ import annotations

import inspect
import types
from typing import Literal, Union, get_args, get_origin

import lightning.pytorch as pl
import pytest

from lightning_lars.config.trainer_arguments import accepts
from lightning_lars.config.trainer_signature import ANYTHING, TRAINER_ARGUMENTS


def accepted_by_annotation(annotation):
    """The types and literal values a parameter annotation names; ANYTHING where it names another class."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    accepted = []
    for member in members:
        if member is type(None):
            accepted.append(None)
        elif get_origin(member) is Literal:
            accepted.extend(get_args(member))
        elif member in (int, float, bool, str):
            accepted.append(member)
        else:
            return ANYTHING
    return tuple(accepted)


SIGNATURE = {
    name: parameter
    for name, parameter in inspect.signature(pl.Trainer.__init__).parameters.items()
    if name != "self"
}


def test_the_table_names_every_trainer_argument_and_no_other():
    assert set(TRAINER_ARGUMENTS) == set(SIGNATURE)


@pytest.mark.parametrize("name", sorted(SIGNATURE))
def test_each_entry_is_what_the_annotation_accepts(name):
    assert TRAINER_ARGUMENTS[name] == accepted_by_annotation(SIGNATURE[name].annotation)


@pytest.mark.parametrize("name", sorted(SIGNATURE))
def test_the_trainer_default_passes_its_own_entry(name):
    default = SIGNATURE[name].default
    assert TRAINER_ARGUMENTS[name] == ANYTHING or accepts(TRAINER_ARGUMENTS[name], default)


def test_a_bool_is_not_an_integer_and_a_literal_keeps_its_type():
    assert not accepts(TRAINER_ARGUMENTS["max_steps"], True)
    assert accepts(TRAINER_ARGUMENTS["precision"], 16) and accepts(TRAINER_ARGUMENTS["precision"], "16")
    assert not accepts(TRAINER_ARGUMENTS["precision"], 16.0)
    assert accepts(TRAINER_ARGUMENTS["deterministic"], "warn") and not accepts(
        TRAINER_ARGUMENTS["deterministic"], "maybe"
    )
