"""BN as the recipe says: statistics over the planned span, and (PFN) without moving averages."""

from __future__ import annotations

import lightning as L
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_info

from lightning_lars.core.errors import UserError
from lightning_lars.models.batch_norm import (
    average_bn_statistics,
    batch_norms,
    consecutive_rank_groups,
    convert_batch_norm,
    set_bn_momentum,
)
from lightning_lars.schedules.scaling import BatchPlan


class BatchNormGroups(L.Callback):
    """Makes every BatchNorm of the module compute its statistics over ``plan.bn_group`` samples.

    Runs in ``setup``: after the process group exists (SyncBatchNorm-style groups need it) and before the
    optimizer is built. Ghost BN when the span is smaller than the device batch; one statistic over
    ``plan.bn_ranks`` consecutive ranks when it is larger; nothing when it equals the device batch.
    `lightning_lars.training.run.build_planned` builds the Trainer with this callback and the plan `build` printed.
    """

    def __init__(self, plan: BatchPlan):
        self.plan = plan
        self.converted = 0

    def setup(self, trainer, pl_module, stage):
        if self.plan.bn_mode == "local" or self.converted:
            return
        if getattr(trainer._accelerator_connector, "sync_batchnorm", False):
            raise UserError(
                "trainer.sync_batchnorm=true would replace the recipe's BN groups by one global statistic;"
                " remove it and set batch.bn_group=N (samples per BN statistic) instead"
            )
        if trainer.world_size != self.plan.world_size:
            raise UserError(
                f"the batch plan was made for {self.plan.world_size} devices, the trainer has"
                f" {trainer.world_size}; set trainer.devices and trainer.num_nodes before planning"
            )
        group = None
        if self.plan.bn_mode == "sync" and dist.is_available() and dist.is_initialized():
            # Every rank creates every subgroup (a collective); each keeps its own.
            group, _ = dist.new_subgroups_by_enumeration(
                consecutive_rank_groups(self.plan.world_size, self.plan.bn_ranks)
            )
        self.converted = convert_batch_norm(pl_module, self.plan.bn_group if group is None else None, group)
        rank_zero_info(
            f"[lightning-lars] BN: {self.converted} layers now normalise over {self.plan.bn_group}"
            f" samples ({self.plan.bn_mode})"
        )

    # Under data parallelism each rank's running statistics follow its own batches (DDP re-broadcasts rank
    # 0's at every forward). Evaluate, save and finish with the mean over ranks, so every rank holds the same
    # model and the checkpoint holds the statistics of all the data, not of rank 0's shard.
    def on_validation_epoch_start(self, trainer, pl_module):
        average_bn_statistics(pl_module)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        average_bn_statistics(pl_module)  # every rank runs this hook: saving a checkpoint is collective
        state = checkpoint.get("state_dict", {})
        for name, bn in batch_norms(pl_module):
            for buffer in ("running_mean", "running_var"):
                if f"{name}.{buffer}" in state:
                    state[f"{name}.{buffer}"] = getattr(bn, buffer).detach().clone()

    def on_train_end(self, trainer, pl_module):
        average_bn_statistics(pl_module)


class BatchNormWithoutMovingAverage(L.Callback):
    """PFN's BN without moving averages (Akiba et al. 2017): eval uses the last training batch's statistics,
    averaged over the ranks just before each evaluation.

    Sets every BatchNorm's momentum to 1.0 (the running statistics are replaced, not averaged, at each
    training forward) and all-reduces them (mean over ranks, as ChainerMN's ``AllreducePersistent``) at the
    start of every validation.
    """

    def setup(self, trainer, pl_module, stage):
        if not batch_norms(pl_module):
            raise UserError(
                "callbacks.bn_without_moving_average is set but the model has no BatchNorm; remove it"
            )
        set_bn_momentum(pl_module, 1.0)

    def on_validation_epoch_start(self, trainer, pl_module):
        average_bn_statistics(pl_module)
