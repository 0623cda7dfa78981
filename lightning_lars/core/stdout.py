"""Printing a long text to a reader that may stop early (``lightning-lars --help | head``).

When the reader closes the pipe, the next write raises ``BrokenPipeError``, and Python prints a traceback for it
and another when it flushes stdout at exit. Python's documentation (``signal``, "Note on SIGPIPE") gives the
cure used here: point stdout at /dev/null so the exit flush succeeds, and exit quietly.
"""

from __future__ import annotations

import os
import sys

EXIT_PIPE_CLOSED = 1  # what Python's "Note on SIGPIPE" example exits with; `| head` reports head's own status


def print_to_reader(text: str) -> None:
    """``print(text)`` and flush; a reader gone before the end ends the program quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's exit flush writes there, not to the pipe
        sys.exit(EXIT_PIPE_CLOSED)
