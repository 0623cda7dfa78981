"""The one LightningModule: a timm image classifier trained with the recipe's optimizer and schedule."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import lightning as L
import timm
import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

import lightning_lars.models  # noqa: F401  (registers alexnet_bn with timm)
from lightning_lars.config import rules
from lightning_lars.config.schema import COMPILE_AUTO
from lightning_lars.optim.param_groups import param_groups

NORM_LAYERS = (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm, torch.nn.LayerNorm)


class ImageClassifier(L.LightningModule):
    """``timm.create_model(arch)`` + cross-entropy + top-1/top-5, optimized as the recipe says.

    Args:
        arch: a timm model name (``resnet50`` is ResNet-50 v1.5, the model of every ResNet record).
        num_classes: classifier width.
        optimizer: ``optimizer(param_groups) -> torch.optim.Optimizer`` (a Hydra ``_partial_``); its
            ``weight_decay`` keyword is the decay of the tensors the exclusion rule keeps.
        lr_schedule: pure ``step -> lr`` function, applied by
            `lightning_lars.callbacks.techniques.schedule.ScheduleCallback`.
        exclusion_rule: which tensors skip weight decay and LARS/LAMB trust adaptation:
            ``"ndim<=1"`` (BN gamma/beta and biases; MLPerf, Goyal), ``"none"`` (You et al. 2017) or
            ``"norm_layers"`` (only BN/LN/GN parameters; the LAMB authors' ResNet-50 code).
        zero_init_last: zero the last BN gamma of each residual block (Goyal et al. sec. 5.1).
        fc_init_std: if set, init the classifier weight ~ N(0, std) and bias 0 (Goyal: 0.01).
        label_smoothing: cross-entropy label smoothing (0.1 in the MLPerf and TPU runs).
        l2_in_loss: if > 0, add ``l2_in_loss * sum(w^2) / 2`` over every parameter outside normalization layers
            to the training loss: TF's ``weight_decay * add_n(tf.nn.l2_loss(v))`` over the non-BN variables
            (tensorflow/tpu and Google MLPerf v0.6 ``resnet_main.py``), on top of the optimizer's own decay.
        channels_last: NHWC memory format (faster convolutions with tensor cores / AMP).
        compile: ``False`` (eager), ``"auto"`` (default: torch.compile's default mode on CUDA, eager elsewhere) or a
            ``torch.compile`` mode (`lightning_lars.config.schema.COMPILE_MODES`).
            ``self.model`` is compiled in place (``nn.Module.compile``), lazily at its first forward: the
            state_dict keeps its keys (no ``_orig_mod.``), so compiled and eager runs load each other's
            checkpoints, and the optimizer's groups and the sharding strategies see the same modules.
        model_kwargs: further ``timm.create_model`` arguments, passed unchanged.
    """

    def __init__(
        self,
        arch: str,
        num_classes: int,
        optimizer: Callable[..., torch.optim.Optimizer],
        lr_schedule: Callable[[int], float],
        exclusion_rule: str = "ndim<=1",
        zero_init_last: bool | None = None,
        fc_init_std: float | None = None,
        label_smoothing: float = 0.0,
        channels_last: bool = False,
        compile: str | bool = "auto",
        l2_in_loss: float = 0.0,
        model_kwargs: dict[str, Any] | None = None,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["optimizer", "lr_schedule"])
        kwargs = dict(model_kwargs or {})
        if zero_init_last is not None:  # only models with residual BN (ResNets) take this argument
            kwargs["zero_init_last"] = zero_init_last
        self.model = timm.create_model(arch, pretrained=False, num_classes=num_classes, **kwargs)
        if fc_init_std is not None:
            classifier = self.model.get_classifier()
            torch.nn.init.normal_(classifier.weight, mean=0.0, std=fc_init_std)
            torch.nn.init.zeros_(classifier.bias)
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        # Here (or in setup for auto, once the device is known), not in configure_model: FSDP2Strategy shards
        # the blocks itself only for a module without one. Compiling is lazy (the first forward traces).
        mode = rules.compile_mode(compile)  # auto: None until setup knows the device
        if mode is not None:
            self.model.compile(mode=mode)
        self.optimizer_factory = optimizer
        self.lr_schedule = lr_schedule
        top5 = min(5, num_classes)
        # validate_args=False: torchmetrics' argument checks run torch.unique on the labels at every update,
        # which on a GPU makes the host wait for the device (the labels come from our own data modules).
        accuracy = functools.partial(MulticlassAccuracy, num_classes, average="micro", validate_args=False)
        self.train_top1 = accuracy(top_k=1)
        self.val_top1 = accuracy(top_k=1)
        self.val_top5 = accuracy(top_k=top5)

    def setup(self, stage: str) -> None:
        device_type = self.trainer.strategy.root_device.type
        mode = rules.compile_mode(self.hparams.compile, device_type)  # CUDA graphs off CUDA: refused here
        if self.hparams.compile == COMPILE_AUTO and mode is not None:
            if not getattr(self.model, "_compiled_call_impl", None):  # setup runs again for validate/test
                self.model.compile(mode=mode)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.hparams.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.model(images)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        logits = self(images)
        # Mean over this device's micro-batch; Lightning divides by the accumulation count and DDP averages
        # over ranks, so the gradient is the mean over the whole global batch (Goyal et al. sec. 2.1).
        loss = F.cross_entropy(logits, labels, label_smoothing=self.hparams.label_smoothing)
        if self.hparams.l2_in_loss:
            loss = loss + self.hparams.l2_in_loss * self.l2_term()
        self.train_top1(logits, labels)
        # Not prog_bar: Lightning converts every progress-bar metric to a Python number after each batch, a
        # host read that waits for the device; the bar reads the loss itself, only at log steps.
        self.log("train/loss", loss, on_step=True, on_epoch=True, sync_dist=False)
        self.log("train/top1", self.train_top1, on_step=False, on_epoch=True)
        return loss

    def l2_term(self) -> torch.Tensor:
        """``sum(tf.nn.l2_loss(v)) = sum(w^2) / 2`` over the parameters outside normalization layers.

        TF's ``'batch_normalization' not in v.name``: every tensor of a non-norm layer, the FC bias included.
        Read from the modules at each call, so parameters replaced by a sharding wrapper are the ones summed."""
        params = [
            p
            for m in self.model.modules()
            if not isinstance(m, NORM_LAYERS)
            for p in m.parameters(recurse=False)
        ]
        return sum(p.float().pow(2).sum() for p in params) / 2

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        self.val_top1(logits, labels)
        self.val_top5(logits, labels)
        self.log("val/loss", loss, on_epoch=True, sync_dist=True)
        self.log("val/top1", self.val_top1, on_epoch=True, prog_bar=True)
        self.log("val/top5", self.val_top5, on_epoch=True)

    def configure_optimizers(self):
        weight_decay = getattr(self.optimizer_factory, "keywords", {}).get("weight_decay", 0.0)
        groups = param_groups(self.model, weight_decay, self.hparams.exclusion_rule)
        # The schedule sets every group's LR before each step; step 0's value is a valid initial LR.
        optimizer = self.optimizer_factory(groups, lr=self.lr_schedule(0))
        trainer = self._trainer
        if getattr(optimizer, "_step_supports_amp_scaling", False) and trainer and trainer.gradient_clip_val:
            # Lightning clips only gradients the AMP scaler unscaled itself, and refuses optimizers that unscale
            # in their step: this one then leaves it to the scaler (one host read per step, as before)
            optimizer._step_supports_amp_scaling = False
        return optimizer
