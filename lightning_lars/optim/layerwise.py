"""What LARS, LAMB, NLCG and Neumann share as ``torch.optim.Optimizer`` subclasses: param groups resolved by the
exclusion rule, fp32 state kept through ``load_state_dict``, and torch's closure call. Their steps share
nothing here; the multi-tensor work they share is in ``multi_tensor``."""

from __future__ import annotations

import torch
from torch.optim import Optimizer

from lightning_lars.core.errors import UserError
from lightning_lars.optim import multi_tensor
from lightning_lars.optim.param_groups import UNSHARDED_SHAPE, split_unresolved


class LayerwiseOptimizer(Optimizer):
    """An optimizer whose param groups say per group whether its tensors are adapted (``trust_adaptation``).

    * ``add_param_group``: a group without ``trust_adaptation`` (e.g. plain ``model.parameters()``) is split by
      ``param_groups.split_unresolved``: tensors the exclusion rule keeps are adapted, the rest get no decay
      and no adaptation; a subclass whose form adapts everything says so in `adapts_all`.
    * ``load_state_dict``: torch casts state to each parameter's dtype; the fp32 masters and state of bf16/fp16
      parameters are read back in fp32 (``multi_tensor.restore_fp32_state``).
    * `closure_loss`: the closure's loss, computed with gradients on inside a ``no_grad`` step.

    No state, hyperparameters or step of its own: a subclass passes its ``defaults`` to ``Optimizer`` as usual.
    """

    def adapts_all(self, param_group: dict) -> bool:
        """True if a group without ``trust_adaptation`` is adapted and decayed whole instead of split."""
        return False

    def add_param_group(self, param_group: dict) -> None:
        """Add a group; one without ``trust_adaptation`` is first resolved by the exclusion rule."""
        params = param_group["params"]
        if not isinstance(params, torch.Tensor):  # torch itself wraps a single tensor
            param_group = {**param_group, "params": list(params)}  # a generator is read once, here
            check = [p[1] if isinstance(p, tuple) else p for p in param_group["params"]]
            _refuse_untagged_fsdp1(type(self).__name__, check)
        for part in split_unresolved(param_group, adapt_all=self.adapts_all(param_group)):
            super().add_param_group(part)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        multi_tensor.restore_fp32_state(self, state_dict)

    @staticmethod
    def closure_loss(closure):
        """``closure()`` with gradients enabled (``step`` runs under ``no_grad``), or None without a closure."""
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()


def _refuse_untagged_fsdp1(name: str, params: list[torch.Tensor]) -> None:
    """FSDP1 hands out 1-D flat shards (its ``_flat_param``, or 1-D slices with ``use_orig_params=True``): by
    their shape the exclusion rule excludes every one (a silent momentum SGD) and ``form="you2017"`` would take
    per-shard norms. `param_groups.param_groups` tags each with its true shape; an untagged one is refused."""
    untagged = [i for i, p in enumerate(params) if getattr(p, "_fsdp_flattened", False)]
    untagged = [i for i in untagged if not hasattr(params[i], UNSHARDED_SHAPE)]
    if untagged:
        raise UserError(
            f"{name} got {len(untagged)} FSDP1-flattened parameters (first: index {untagged[0]}) whose true"
            " shapes it cannot see, so it would train them as momentum SGD with per-shard norms: pass"
            " lightning_lars.optim.param_groups.param_groups(fsdp_model, weight_decay) (FSDP1 with"
            " use_orig_params=True), or use strategy=fsdp1"
        )
