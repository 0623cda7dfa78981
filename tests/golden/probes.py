"""Callbacks the golden check adds to the demo's command (this folder is on the run's PYTHONPATH):

- ``+callbacks.golden._target_=probes.PrintLosses``: each step's training loss at full float32 precision (the
  progress line prints 4 decimals, too coarse to tell a CPU's rounding from a 1 % change of the LR).
- ``+callbacks.swap._target_=probes.SwapTwoSteps +callbacks.swap.step=S +callbacks.swap.batch=B``: one real
  change of data order, made in the real loader, for the test that the check still sees one: the images of
  step S+1 train at step S and those of step S at step S+1 (1-based, first epoch); the same images, schedule
  and weights otherwise. It wraps the FFCVDataModule's global epoch order (``epoch_order``, which the
  DataModule reads when each epoch starts, after the callbacks are made).
"""

from __future__ import annotations

from lightning.pytorch import Callback

from lightning_lars.data import ffcv_datamodule

LINE = "[golden] step {step} loss {loss!r}"  # repr: the shortest text that reads back as the same float


class PrintLosses(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.is_global_zero:
            print(LINE.format(step=trainer.global_step, loss=float(outputs["loss"])), flush=True)


class SwapTwoSteps(Callback):
    def __init__(self, step: int, batch: int):
        original = ffcv_datamodule.epoch_order

        def swapped(num_samples, *, seed, epoch, order):
            indices = original(num_samples, seed=seed, epoch=epoch, order=order)
            if epoch == 0:
                first = slice((step - 1) * batch, step * batch)
                second = slice(step * batch, (step + 1) * batch)
                indices[first], indices[second] = indices[second].copy(), indices[first].copy()
            return indices

        ffcv_datamodule.epoch_order = swapped
