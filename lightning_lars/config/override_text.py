"""Command-line values as Hydra's override grammar reads them.

Hydra's grammar (hydra/grammar/OverrideLexer.g4) takes an unquoted value only of ASCII letters, digits and
``_ - / \\ + . $ % * @ ? | :`` with spaces between; anything else (``é``, ``数``, ``# ~ ! & ; ( ) [ ] { } < > = '
"``) is its syntax or a token it does not know, and ``,`` makes a sweep. A quoted value takes any text. A value
with non-ASCII letters (``data.root=/data/données``) can only mean the text itself: it is quoted here for Hydra.
For the other characters Hydra's own parse error says where it stopped.
"""

from __future__ import annotations

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
