"""Command-line values as Hydra's override grammar reads them.

Hydra's grammar (hydra/grammar/OverrideLexer.g4) takes an unquoted value only of ASCII letters, digits and
``_ - / \\ + . $ % * @ ? | :`` with spaces between; anything else (``é``, ``数``, ``# ~ ! & ; ( ) [ ] { } < > = '
"``) is its syntax or a token it does not know, and ``,`` makes a sweep. A quoted value takes any text. A value
with non-ASCII letters (``data.root=/data/données``) can only mean the text itself: it is quoted here for Hydra.
For the other characters the one-line error names the ones that need quoting in that value, tried against
Hydra's own parser.
"""

from __future__ import annotations

import re
import shlex

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

_PARSER = OverridesParser.create()
COMPOUND = ("[", "{")  # a list or a dict: Hydra's syntax around the values


def _parses_to(override: str, value: str) -> bool:
    try:
        return _PARSER.parse_override(override).value() == value
    except HydraException:
        return False


def _parses(override: str) -> bool:
    try:
        _PARSER.parse_override(override)
        return True
    except HydraException:
        return False


def quote_plain_text(override: str) -> str:
    """``key=value`` with a non-ASCII ``value`` that Hydra cannot parse unquoted, as ``key='value'`` (which Hydra
    reads as exactly ``value``); every other override unchanged."""
    key, equals, value = override.partition("=")
    if not equals or value.isascii() or value.startswith(COMPOUND) or "," in value or _parses(override):
        return override  # a list, dict or sweep is Hydra's syntax: its elements are quoted one by one
    for quote in ("'", '"'):
        quoted = f"{key}={quote}{value}{quote}"
        if quote not in value and _parses_to(quoted, value):
            return quoted
    return override


def parse_error_line(overrides: list[str]) -> str:
    """Why Hydra cannot parse ``overrides``: the first it refuses and the characters of its value that Hydra
    reads only inside quotes, with the override quoted for the shell."""
    for override in overrides:
        if _parses(override):
            continue
        key, _, value = override.partition("=")
        # in a list or dict, the characters of its elements (its brackets and commas are the syntax)
        text = (value[1:-1] if value.startswith(COMPOUND) else value).replace(",", "")
        # choice(1,2 or range(3: Hydra's function syntax, mistyped; Hydra's own reason below says where
        needs = [] if re.match(r"\w+\(", value) else sorted({c for c in text if not _parses(f"k=a{c}b")})
        if needs and "," in value and not value.startswith(COMPOUND) and '"' not in value:  # a sweep a,b
            quoted = ",".join(f'"{e}"' for e in value.split(","))
            return (
                f"cannot parse {override}: Hydra reads {' '.join(repr(c) for c in needs)} only in a quoted"
                f" value; quote each value of the sweep: {shlex.quote(f'{key}={quoted}')}"
            )
        if needs and value.startswith(COMPOUND):
            shown = " ".join(f"'{c}'" for c in needs)
            quoted = ",".join(f'"{e.strip()}"' for e in value[1:-1].split(","))
            example = (
                f"{key}=[{quoted}]" if value.startswith("[") and '"' not in value else f'{key}=["a é",b]'
            )
            return (
                f"cannot parse {override}: Hydra reads {shown} only in a quoted value; quote each element that"
                f" holds them: {shlex.quote(example)}"
            )
        if needs and '"' not in value:
            shown = " ".join(f"'{c}'" if c != "'" else '"\'"' for c in needs)
            fix = shlex.quote(f'{key}="{value}"')
            return f"cannot parse {override}: Hydra reads {shown} only in a quoted value; write {fix}"
        try:
            _PARSER.parse_override(override)
        except HydraException as err:
            reason = str(err).splitlines()[0].rstrip(".")
            return f"cannot parse {override}: {reason} (Hydra's override grammar: key=value, key=[a,b], quoted 'text')"
    return "cannot parse the command line (Hydra's override grammar: key=value, key=[a,b], quoted 'text')"
