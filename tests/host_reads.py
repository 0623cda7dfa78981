"""The host-read recorder the sync tests share (CPU tier, GPU probe and the GPU job): every device-to-host read
during training, where it came from, and whether it fell between log steps. Importable as ``host_reads`` from
``tests/``, as ``helpers`` is."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import torch
from torch.utils._python_dispatch import TorchDispatchMode


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
