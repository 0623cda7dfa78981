"""Callbacks the GPU recipe tests add with +callbacks.NAME._target_=gpu_probe.CLASS: the process group torch
itself reports (so the test reads the backend from torch, not from our config), and every host sync."""

import json
import os
from pathlib import Path

import lightning as L
import torch.distributed as dist
from host_reads import HostReadRecorder


class ProcessGroupProbe(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 0:
            backend = dist.get_backend() if dist.is_initialized() else "none"
            world = dist.get_world_size() if dist.is_initialized() else 1
            print(f"probe: backend={backend} world_size={world} device={pl_module.device.type}", flush=True)


class HostSyncProbe(HostReadRecorder):
    """``+callbacks.sync_probe._target_=gpu_probe.HostSyncProbe``: every device read and every synchronising
    CUDA call torch reports (``set_sync_debug_mode``), with its stack, written to ``$SYNC_PROBE_OUT`` as JSON with
    the run's precision and whether an AMP loss scaler ran (what the recipe really trained with)."""

    def __init__(self):
        root = Path(__file__).resolve().parents[2]
        super().__init__((root / "lightning_lars", root / "callbacks"), log_every=1, cuda_sync_warnings=True)

    def setup(self, trainer, pl_module, stage):
        self.log_every = max(1, trainer.log_every_n_steps)
        trainer.callbacks.remove(self)  # first: its on_train_batch_end must mark a log step before ours read
        trainer.callbacks.insert(0, self)

    def on_train_end(self, trainer, pl_module):
        super().on_train_end(trainer, pl_module)
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        run = {"precision": str(trainer.precision), "scaler": scaler is not None, "reads": self.reads}
        Path(os.environ["SYNC_PROBE_OUT"]).write_text(json.dumps(run))
