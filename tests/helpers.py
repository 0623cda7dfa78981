"""Helpers every tier of the tests shares: a free TCP port for a gloo rendezvous, a command run the way a user
runs it (``run``, ``entry_point_env``), the demo dataset made by its real command, small seeded models, and the
check that a command failed with one line of error, a one-task SLURM batch job's variables, a script of
``benchmarks/`` as a module.

Importable as ``helpers``: pytest puts ``tests/`` on ``sys.path`` when it loads ``tests/conftest.py``
(the default ``prepend`` import mode; ``tests/`` has no ``__init__.py``), and processes started with the
``spawn`` method (``mp.spawn``, Lightning's ``start_method="spawn"``) inherit the parent's ``sys.path``.
A program started with ``subprocess`` sees it only if its ``PYTHONPATH`` names ``tests/`` (``TESTS_DIR``).
"""

from __future__ import annotations

import importlib.util
import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent  # the checkout
# The entry point and make as a user types them (this interpreter; make from the checkout, from any folder,
# without reinstalling the venv it would otherwise check first)
TRAIN = [sys.executable, "-m", "lightning_lars.train"]
MAKE = ["make", "--no-print-directory", "-C", str(ROOT), "-o", ".venv/.installed", f"PY={sys.executable}"]


_PORTS_GIVEN: set[int] = set()
_LOWEST_PORT = 20000  # above the well-known services; SLURM's per-job ports (Lightning: 15000 + job id) below


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a rendezvous that binds it seconds later.

    Not one the OS picks by binding port 0: that is an ephemeral port, which the kernel also hands to the
    outgoing connections of every other process (gloo's mesh in the other xdist worker), so one can take it in
    the seconds before our rank 0 binds it (EADDRINUSE). This takes a port below the ephemeral range, which
    the kernel never assigns on its own, from a slice of that span that belongs to this xdist worker, and
    never the same one twice in a process. Where the range leaves no room below it, the OS picks.
    """
    low = _ephemeral_low()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    width = (low - _LOWEST_PORT) // max(workers, 1)
    if width < 64:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    start = _LOWEST_PORT + worker * width
    for port in random.Random().sample(range(start, start + width), k=width):
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError(f"no free TCP port in {start}-{start + width - 1}")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 where /proc does not say)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# what SLURM sets in a one-task batch job (sbatch's job 4242 on one node), for the requeue and run-folder code
SLURM_VARS = {
    "SLURM_JOB_ID": "4242",
    "SLURM_NTASKS": "1",
    "SLURM_JOB_NAME": "lars",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "localhost",
}


def outside_slurm(monkeypatch) -> None:
    """Unset every ``SLURM_*`` variable for this test: a test run inside an allocation (CI on a SLURM node)
    would otherwise make Lightning and our preemption code act as a SLURM job."""
    for name in list(os.environ):
        if name.startswith("SLURM_"):
            monkeypatch.delenv(name)


def entry_point_env(*paths: Path, unset: Iterable[str] = (), **extra: str) -> dict[str, str]:
    """The environment for a subprocess of the entry point: ``paths`` (a folder of probe callbacks a test names
    with ``+callbacks.NAME._target_=module.Class``), the test helpers (which such probes import) and the checkout
    importable, offline W&B, unbuffered output, no SLURM job of the caller's; then ``extra``; last, without the
    names in ``unset`` (``"PIP_*"``: every name that starts so), for a program that must not see them."""
    # WANDB_SERVICE: set once this process ran W&B (an in-process test); a child would join that service,
    # which still holds the run of a process we SIGKILLed ("run ID ... is in use") -- a fresh job has none
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "WANDB_SERVICE"}
    importable = [*map(str, paths), str(TESTS_DIR), str(ROOT), clean.get("PYTHONPATH", "")]
    env = {
        **clean,
        "PYTHONPATH": os.pathsep.join(p for p in importable if p),
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }
    prefixes = tuple(name.removesuffix("*") for name in unset if name.endswith("*"))
    names = set(unset)
    return {k: v for k, v in env.items() if k not in names and not (prefixes and k.startswith(prefixes))}


def run(
    command: Sequence[str | os.PathLike],
    *,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess:
    """``command`` run to its end from ``cwd`` (default: the checkout) in ``env`` (default:
    ``entry_point_env()``), its stdout and stderr captured as text. A nonzero exit is returned, not raised: the
    tests read it. ``timeout`` (s) only ends a hung command; a normal one takes far less."""
    return subprocess.run(
        [os.fspath(part) for part in command],
        cwd=cwd,
        env=dict(entry_point_env() if env is None else env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def make_demo_data(
    data_dir: Path, *, train_per_class: int = 16, val_per_class: int = 8, env: Mapping[str, str] | None = None
) -> Path:
    """The demo dataset (10 classes; ``train_per_class`` and ``val_per_class`` images each) in
    ``data_dir/demo``, made by its real command (``python -m lightning_lars.data.demo``) unless it is there
    already; returns ``data_dir``, the folder ``paths.data_dir`` names."""
    if not (data_dir / "demo" / "val.beton").is_file():
        sizes = ["--train-per-class", str(train_per_class), "--val-per-class", str(val_per_class)]
        demo = [sys.executable, "-m", "lightning_lars.data.demo", "--out", data_dir / "demo", *sizes]
        made = run([*demo, "--workers", "1"], env=env, timeout=600)
        assert made.returncode == 0, made.stderr[-2000:]
    return data_dir


# The two places an FFCV pipeline may normalise: in its numpy stage (float32 over the copy) or on the device after
# the copy (uint8 over it, normalised in on_after_batch_transfer).
NORMALISED_BEFORE_COPY = [
    {"center_crop": {"ratio": 1.0}},
    {"normalize": "imagenet"},
    "to_tensor",
    "to_device",
    "channels_last",
]
NORMALISED_AFTER_COPY = [
    {"center_crop": {"ratio": 1.0}},
    "to_tensor",
    "to_device",
    "channels_last",
    {"normalize": "imagenet"},
]


def demo_ffcv_module(root: Path, ops: list, batch_size: int, seed: int = 0):
    """An FFCVDataModule with ``ops`` for both splits (sequential order, 32 px) over the demo's generator at two
    classes (16 train and 8 val images each), prepared in ``root`` on first use; ``seed``: the DataModule's
    (its seeded random crop and flip). Needs FFCV."""
    from lightning_lars.data.demo import prepare_demo
    from lightning_lars.data.ffcv_datamodule import FFCVDataModule

    if not (root / "val.beton").is_file():
        prepare_demo(root, num_classes=2, train_per_class=16, val_per_class=8, num_workers=1, progress=False)
    return FFCVDataModule(
        str(root / "train.beton"),
        str(root / "val.beton"),
        num_classes=2,
        batch_size=batch_size,
        num_workers=1,
        resolution=32,
        val_resolution=32,
        order="sequential",
        pipeline={"train": ops, "val": ops},
        seed=seed,
    )


def group_config(group: str, option: str) -> DictConfig:
    """``conf/<group>/<option>.yaml`` as Hydra composes it: its ``defaults`` list applied (the typed schema it
    extends), so the node is what a run's ``cfg.<group>`` holds. A bare ``OmegaConf.load`` keeps ``defaults``
    as a key, which ``instantiate`` then passes on as an argument."""
    from hydra import compose, initialize_config_dir

    from lightning_lars.config import groups  # noqa: F401  (stores the schemas the defaults list names)
    from lightning_lars.config.paths import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=f"{group}/{option}")[group]


def unset_keys(node: Any) -> set[str]:
    """The dotted keys of a config left ``???``, read unresolved (``${hydra:...}`` needs a running app)."""

    def walk(value: Any, where: str) -> set[str]:
        if isinstance(value, dict):
            return set().union(*(walk(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()))
        return {where} if value == "???" else set()

    return walk(OmegaConf.to_container(node, resolve=False), "")


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
    sizes: tuple[int, int, int] = (6, 5, 2),
    dtype: torch.dtype = torch.float64,
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Module:
    """A seeded ``Linear -> BatchNorm1d -> activation -> Linear`` in ``dtype``: ``sizes`` are (inputs,
    hidden, outputs). Two 2-D weights (adapted) and four 1-D tensors (biases, BN gamma and beta: excluded)."""
    inputs, hidden, outputs = sizes
    torch.manual_seed(0)
    layers = [nn.Linear(inputs, hidden), nn.BatchNorm1d(hidden), activation(), nn.Linear(hidden, outputs)]
    return nn.Sequential(*layers).to(dtype)


def steps_with(
    model: nn.Module, optimizer: torch.optim.Optimizer, grads_per_step: Sequence, lrs: Sequence[float]
) -> list[torch.Tensor]:
    """``optimizer.step()`` once per entry of ``grads_per_step`` (one gradient per parameter of ``model``, in
    its order, cast to the parameter's dtype) at the matching LR of ``lrs`` (every group's); returns the
    weights after the last step, in float64, for a comparison with a float64 reference."""
    for grads, lr in zip(grads_per_step, lrs):
        for p, g in zip(model.parameters(), grads):
            p.grad = g.to(p.dtype).clone()
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
    return [p.detach().double() for p in model.parameters()]


def assert_one_line_error(done: subprocess.CompletedProcess, *phrases: str, alone: bool = True) -> str:
    """``done`` exited with status 2, no traceback, and its stderr ends in ONE ``error: ...`` line containing
    every phrase; returns that line.

    ``alone``: stderr is that line and nothing else. ``alone=False`` lets other lines come before it (a
    program that logs progress, or a library warning, before it fails), still with one ``error:`` line."""
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]  # one, even counting "error:" unspaced
    assert len(errors) == 1 and lines[-1] == errors[0], done.stderr[-3000:]
    assert errors[0].startswith("error: "), errors[0]
    if alone:
        assert len(lines) == 1, done.stderr[-3000:]
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    return errors[0]


def assert_hydra_error(done: subprocess.CompletedProcess, *phrases: str) -> str:
    """``done`` refused by Hydra while it composed, in Hydra's and OmegaConf's own words: exit status 1, no
    traceback, stderr ending with Hydra's pointer to HYDRA_FULL_ERROR and holding every phrase; returns stderr."""
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert done.stderr.rstrip().endswith("HYDRA_FULL_ERROR=1 for a complete stack trace."), done.stderr[
        -3000:
    ]
    for phrase in phrases:
        assert phrase in done.stderr, done.stderr[-3000:]
    return done.stderr


def benchmark_script(name: str):
    """``benchmarks/<name>.py`` as a module (the folder is no package), loaded once per process and registered in
    ``sys.modules`` under ``name``, where dataclasses look their module up. Its neighbours import as when the script
    runs (``python benchmarks/gpu_check.py`` has benchmarks/ first on its path)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.append(str(ROOT / "benchmarks"))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]
