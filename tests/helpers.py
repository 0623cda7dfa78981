"""Helpers every tier of the tests shares: a free TCP port for a gloo rendezvous, small seeded models, and the
check that a command failed with one line of error.

Importable as ``helpers``: pytest puts ``tests/`` on ``sys.path`` when it loads ``tests/conftest.py``
(the default ``prepend`` import mode; ``tests/`` has no ``__init__.py``), and processes started with the
``spawn`` method (``mp.spawn``, Lightning's ``start_method="spawn"``) inherit the parent's ``sys.path``.
A program started with ``subprocess`` sees it only if its ``PYTHONPATH`` names ``tests/`` (``TESTS_DIR``).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

TESTS_DIR = Path(__file__).resolve().parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it: bind to port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def small_conv_net(
    widths: Sequence[int] = (8, 16, 16), last_conv: int | None = 32, classes: int = 10
) -> nn.Module:
    """A seeded conv net on 3-channel images of at least ``2 * (convs) + 1`` pixels a side (3x3, no padding).

    ``Conv2d(3x3) -> BatchNorm2d -> ReLU`` for each of ``widths``, then a plain ``Conv2d(3x3)`` to
    ``last_conv`` channels if given, global average pooling and a ``Linear`` to ``classes``. So it has 4-D
    conv and 2-D linear weights (adapted by LARS/LAMB) besides 1-D BN and bias tensors (excluded), of unequal
    sizes; gradient tensors of 1-18 KiB with the defaults, so KiB-sized DDP buckets and groups are
    non-trivial. An odd width (13) makes tensors whose sizes do not divide evenly among ranks.
    """
    torch.manual_seed(0)
    layers, width = [], 3
    for out in widths:
        layers += [nn.Conv2d(width, out, 3), nn.BatchNorm2d(out), nn.ReLU()]
        width = out
    if last_conv is not None:
        layers.append(nn.Conv2d(width, last_conv, 3))
        width = last_conv
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))


def small_mlp(
    sizes: tuple[int, int, int] = (6, 5, 2), dtype: torch.dtype = torch.float64, relu: bool = True
) -> nn.Module:
    """A seeded ``Linear -> BatchNorm1d [-> ReLU] -> Linear`` in ``dtype``: ``sizes`` are (inputs, hidden,
    outputs). Two 2-D weights (adapted) and four 1-D tensors (biases, BN gamma and beta: excluded)."""
    inputs, hidden, outputs = sizes
    torch.manual_seed(0)
    layers = [nn.Linear(inputs, hidden), nn.BatchNorm1d(hidden)] + ([nn.ReLU()] if relu else [])
    return nn.Sequential(*layers, nn.Linear(hidden, outputs)).to(dtype)


def assert_one_line_error(done: subprocess.CompletedProcess, *phrases: str, alone: bool = True) -> str:
    """``done`` exited with status 2, no traceback, and its stderr ends in ONE ``error: ...`` line containing
    every phrase; returns that line.

    ``alone``: stderr is that line and nothing else. ``alone=False`` lets other lines come before it (a
    program that logs progress, or a library warning, before it fails), still with one ``error:`` line."""
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], done.stderr[-3000:]
    if alone:
        assert len(lines) == 1, done.stderr[-3000:]
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    return errors[0]
