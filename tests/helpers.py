"""Helpers every tier of the tests shares: a free TCP port for a gloo rendezvous, a command run the way a user
runs it (``run``, ``entry_point_env``), the demo dataset made by its real command, small seeded models, and the
check that a command failed with one line of error, a script of ``benchmarks/`` as a module.

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
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

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


class HostReadRecorder(L.Callback):
    """Every device-to-host read during training, with where it came from and whether it fell between log steps.

    A read is what makes the host wait for the device: ``aten._local_scalar_dense`` (``.item()``, ``float(t)``,
    ``bool(t)``, ``int(t)``), a copy from a non-CPU tensor to the CPU, and ``Tensor.tolist``/``numpy``/
    ``__array__`` (which read memory without dispatching an op: on a CPU run they are the calls that would read
    a device tensor on a GPU). Each is attributed to our code when a frame of ``roots`` (the project's folders)
    is on the stack inside Lightning's ``_run_stage`` (Lightning's own loop is not ours; our hooks, modules and
    optimizers are), else to the first frame outside torch. A read is *quiet* when it happens inside an
    optimizer step that logs nothing: not the first batch of an epoch, not an optimizer step that completes a
    multiple of ``log_every`` steps (from its batch start to the hooks after it, when our checks and Lightning's
    logging run), not validation. Put it first in ``trainer.callbacks``: its ``on_train_batch_end`` must see
    the step before the other callbacks' hooks read anything.

    A Python number handed to ``LightningModule.log`` is recorded too (kind ``number logged``): Lightning makes
    it a tensor on the module's device (``torch.tensor(value, device=self.device)``), on CUDA a copy from
    pageable host memory that waits for the GPU. On a CPU run that copy is free, so this is how a CPU test sees
    the read a GPU run would make.
    """

    def __init__(self, roots: Sequence[Path], log_every: int, cuda_sync_warnings: bool = False):
        self.roots = tuple(str(Path(r).resolve()) for r in roots)
        self.log_every = log_every
        # also every synchronising CUDA call torch reports (torch.cuda.set_sync_debug_mode("warn")): unique,
        # nonzero, copies from pageable memory, what no Python-level read shows
        self.cuda_sync_warnings = cuda_sync_warnings
        self._showwarning = None
        self.reads: list[dict] = []  # {"step", "quiet", "ours", "kind", "where"}
        self._quiet = False
        self._mode, self._trainer = None, None
        self._patched: dict[str, object] = {}

    def _where(self) -> tuple[bool, str]:
        frame, first_outside_torch, ours = sys._getframe(2), None, None
        while frame is not None:
            path = frame.f_code.co_filename
            if frame.f_code.co_name == "_run_stage" and "lightning" in path:
                break
            here = f"{Path(path).name}:{frame.f_lineno} {frame.f_code.co_name}"
            if ours is None and path.startswith(self.roots):
                ours = here
            if first_outside_torch is None and "/torch/" not in path and path != __file__:
                first_outside_torch = here
            frame = frame.f_back
        return ours is not None, ours or first_outside_torch or "?"

    def record(self, kind: str) -> None:
        ours, where = self._where()
        step = self._trainer.global_step if self._trainer is not None else -1
        self.reads.append({"step": step, "quiet": self._quiet, "ours": ours, "kind": kind, "where": where})

    def on_train_start(self, trainer, pl_module):
        self._trainer = trainer
        recorder = self

        class Reads(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func is torch.ops.aten._local_scalar_dense.default:
                    recorder.record("item")
                elif func is torch.ops.aten._to_copy.default and _to_host(
                    args[0], (kwargs or {}).get("device")
                ):
                    recorder.record("copy to cpu")
                elif func is torch.ops.aten.copy_.default and _to_host(args[1], args[0].device):
                    recorder.record("copy to cpu")
                return func(*args, **(kwargs or {}))

        for name in ("tolist", "numpy", "__array__"):
            original = getattr(torch.Tensor, name)
            self._patched[name] = original

            def wrapped(tensor, *args, _original=original, _name=name, **kwargs):
                recorder.record(_name)
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, wrapped)
        original_log = L.LightningModule.log
        self._patched_log = original_log

        def log(module, name, value, *args, **kwargs):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                recorder.record("number logged")
            return original_log(module, name, value, *args, **kwargs)

        L.LightningModule.log = log
        self._mode = Reads()
        self._mode.__enter__()
        if self.cuda_sync_warnings:
            self._showwarning = warnings.showwarning

            def show(message, category, filename, lineno, file=None, line=None):
                if "synchronizing" in str(message).lower():
                    recorder.record("cuda sync")
                else:
                    recorder._showwarning(message, category, filename, lineno, file, line)

            warnings.showwarning = show
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # the step about to run logs (global_step + 1 is its number once done): Lightning and we may read here
        logs = (trainer.global_step + 1) % self.log_every == 0
        self._quiet = batch_idx > 0 and trainer.global_step > 0 and not logs

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % self.log_every == 0:
            self._quiet = False  # a log step: our checks and Lightning's logging read here, by design

    def on_train_epoch_end(self, trainer, pl_module):
        self._quiet = False

    def on_validation_start(self, trainer, pl_module):
        self._quiet = False

    def on_train_end(self, trainer, pl_module):
        if self._showwarning is not None:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = self._showwarning
        self._mode.__exit__(None, None, None)
        for name, original in self._patched.items():
            setattr(torch.Tensor, name, original)
        L.LightningModule.log = self._patched_log
        self._quiet = False

    def quiet_reads(self, ours: bool) -> list[dict]:
        return [read for read in self.reads if read["quiet"] and read["ours"] == ours]


def _to_host(source: torch.Tensor, target) -> bool:
    return target is not None and torch.device(target).type == "cpu" and source.device.type != "cpu"


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
