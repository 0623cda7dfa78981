"""A callback the GPU recipe test adds with +callbacks.gpu_probe._target_=gpu_probe.ProcessGroupProbe: prints
the process group torch itself reports, so the test reads the backend from torch, not from our config."""

import lightning as L
import torch.distributed as dist


class ProcessGroupProbe(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 0:
            backend = dist.get_backend() if dist.is_initialized() else "none"
            world = dist.get_world_size() if dist.is_initialized() else 1
            print(f"probe: backend={backend} world_size={world} device={pl_module.device.type}", flush=True)
