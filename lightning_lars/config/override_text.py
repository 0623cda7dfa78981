"""Command-line values as Hydra's override grammar reads them.

Hydra's grammar (hydra/grammar/OverrideLexer.g4) takes an unquoted value only of ASCII letters, digits and
``_ - / \\ + . $ % * @ ? | :`` with spaces between; anything else (``é``, ``数``, ``# ~ ! & ; ( ) [ ] { } < > = '
"``) is its syntax or a token it does not know, and ``,`` makes a sweep. A quoted value takes any text. A value
with non-ASCII letters (``data.root=/data/données``) can only mean the text itself: it is quoted here for Hydra.
For the other characters Hydra's own parse error says where it stopped.
"""

from __future__ import annotations


def quote_plain_text(override: str) -> str:
    """``key=value`` with a non-ASCII ``value``, which Hydra cannot parse unquoted, as ``key='value'`` (which Hydra
    reads as exactly ``value``); every other override unchanged."""
    key, equals, value = override.partition("=")
    if not equals or value.isascii() or value.startswith(("[", "{")) or "," in value or value[:1] in "'\"":
        return override  # a list, dict or sweep is Hydra's syntax: its elements are quoted one by one
    quote = next((q for q in ("'", '"') if q not in value), None)
    if quote is None or value.endswith("\\"):  # no quote Hydra would read back as this exact text
        return override
    return f"{key}={quote}{value}{quote}"
