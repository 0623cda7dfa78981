"""What LARS, LAMB, NLCG and Neumann share as ``torch.optim.Optimizer`` subclasses: param groups resolved by the
exclusion rule, fp32 state kept through ``load_state_dict``, and torch's closure call. Their steps share
nothing here; the multi-tensor work they share is in ``multi_tensor``."""

from __future__ import annotations

import torch
from torch.optim import Optimizer

from lightning_lars.optim import multi_tensor as mt
from lightning_lars.optim.param_groups import split_unresolved


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
        for part in split_unresolved(param_group, adapt_all=self.adapts_all(param_group)):
            super().add_param_group(part)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        mt.restore_fp32_state(self, state_dict)

    @staticmethod
    def closure_loss(closure):
        """``closure()`` with gradients enabled (``step`` runs under ``no_grad``), or None without a closure."""
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()
