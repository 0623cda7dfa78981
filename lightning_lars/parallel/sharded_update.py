"""Weight-update sharding for DDP (Kumar et al. 2019, arXiv 1909.09756, sec. 3.2 "distributed optimizer
state and weight update"): each rank updates its own share of the tensors, then the weights are all-gathered.

Under DDP every rank holds the same averaged gradient and repeats the same optimizer step on every tensor.
:class:`ShardedUpdate` wraps a LARS/LAMB (or any per-tensor) optimizer so that each rank steps only the
tensors it owns; optimizer state (momentum, Adam moments, fp32 masters) then lives on the owner only.

* Ownership: whole tensors, largest first, each to the rank with the fewest elements so far (ties: lower
  rank). Whole tensors keep the trust ratios exact with no extra collective (``||w||`` and ``||g||`` of a
  tensor are on its owner). Depends only on shapes and order: every rank computes the same assignment.
* Step: the inner optimizer runs on the owned tensors of each param group (the group lists are swapped for
  the step and restored), then one ``all_gather`` per dtype of the owners' flat updated weights.
* LAMB's global gradient clip ``min(1, max_grad_norm / ||G||)`` couples all tensors: ``||G||`` is taken
  over every gradient (each rank holds all of them under DDP: no collective), the owned gradients are
  scaled by the same factor into new tensors that stand in for ``p.grad`` during the inner step (``p.grad``
  itself is never written), and the inner optimizer's own clip is off. The result equals unsharded LAMB.
* Checkpoints: :meth:`consolidate_state_dict` (collective; Lightning calls it on every rank before saving,
  as for torch's ``ZeroRedundancyOptimizer``) gathers the full state, so :meth:`state_dict` is exactly the
  unsharded optimizer's: a checkpoint loads with or without sharding. :meth:`load_state_dict` keeps only
  the owned tensors' state. Group-level state (LAMB's step count) comes from the owner of the group's
  first tensor.
* AMP's loss scale: the wrapper takes it as the inner optimizer does (``_step_supports_amp_scaling``, copied at
  construction): ``GradScaler.step`` sets ``grad_scale``/``found_inf`` on the wrapper, which hands them to the
  inner step, so no rank reads ``found_inf`` back. LAMB's global clip then takes ``||G||`` of the unscaled
  gradients (``||G_scaled|| / grad_scale``, exact for the scaler's power-of-two scales).

Cost: the weights' all-gather adds ``n`` bytes of traffic per step on top of DDP's all-reduce (Kumar et al.
split the all-reduce into reduce-scatter + all-gather instead, which a reduce-scatter hook would need).

Limits: ``track_stats``/``last_stats`` of the inner optimizer cover the owned tensors only. For bf16/fp16
parameters under LAMB's clip, the stand-in gradients are rounded to the parameter dtype (unsharded LAMB
scales an fp32 copy), so the two agree to that rounding instead of bitwise.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist
from torch import Tensor
from torch.optim import Optimizer

from lightning_lars.core.errors import UserError
from lightning_lars.optim.loss_scale import scaler_inputs
from lightning_lars.optim.norms import math_dtype

# torch 2.14 renames the flat-tensor all-gather; older releases have only all_gather_into_tensor.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def assign_owners(numels: list[int], world_size: int) -> list[int]:
    """Owner rank of each tensor: largest first to the least-loaded rank (ties: lowest rank, earliest tensor)."""
    load = [0] * world_size
    owners = [0] * len(numels)
    for index in sorted(range(len(numels)), key=lambda i: (-numels[i], i)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        owners[index] = rank
        load[rank] += numels[index]
    return owners


class ShardedUpdate(Optimizer):
    """Each data-parallel rank runs ``optimizer`` on its own tensors; updated weights are all-gathered.

    Args:
        optimizer: the optimizer to shard, built over all parameters on every rank (its state is lazy, so
            nothing is allocated for tensors another rank owns). Its ``param_groups`` are shared, so LR
            schedules that write ``group["lr"]`` work unchanged.
        process_group: the data-parallel group (default: world).
    """

    def __init__(self, optimizer: Optimizer, process_group: dist.ProcessGroup | None = None):
        if not dist.is_available() or not dist.is_initialized():
            raise UserError("strategy.optimizer_sharding needs a distributed run (DDP over 2+ processes)")
        if isinstance(optimizer, ShardedUpdate):
            raise UserError("the optimizer is already sharded: set strategy.optimizer_sharding once")
        if getattr(optimizer, "couples_all_tensors", False):  # NLCG: inner products over every tensor
            raise UserError(
                f"strategy.optimizer_sharding cannot shard {type(optimizer).__name__}: its steps couple"
                " all tensors; set strategy.optimizer_sharding=false"
            )
        self.inner = optimizer
        self.process_group = process_group or dist.group.WORLD
        self.rank = dist.get_rank(self.process_group)
        self.world_size = dist.get_world_size(self.process_group)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        owners = assign_owners([p.numel() for p in params], self.world_size)
        self.owner = dict(zip(params, owners))
        self._owned_lists = [
            [p for p in group["params"] if self.owner[p] == self.rank] for group in optimizer.param_groups
        ]
        self._gather_plan = self._make_gather_plan(params)
        self._full_state: dict | None = None
        # Optimizer.__init__ sets up torch's hook registries; the groups and state are then the inner ones.
        super().__init__(
            [{"params": group["params"]} for group in optimizer.param_groups], optimizer.defaults
        )
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        # an instance attribute, not __getattr__'s forward: the scaler's tensors land on the wrapper, which must
        # pass them on (step); the module may switch it off here for gradient clipping (training/module.py)
        self._step_supports_amp_scaling = bool(getattr(optimizer, "_step_supports_amp_scaling", False))

    def __getattr__(self, name):
        """Attributes of the inner optimizer (``track_stats``, ``grad_norm_source``, ``max_grad_norm``)."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def owned_state_bytes(self) -> int:
        """Bytes of optimizer state tensors held by this rank (for memory reports)."""
        return sum(
            t.numel() * t.element_size()
            for s in self.inner.state.values()
            for t in s.values()
            if isinstance(t, Tensor)
        )

    def _make_gather_plan(self, params: list[Tensor]) -> list[tuple]:
        """Per dtype: (per-rank owned tensors, padded elements per rank) for one all_gather each."""
        by_dtype = defaultdict(lambda: [[] for _ in range(self.world_size)])
        for p in params:
            by_dtype[p.dtype][self.owner[p]].append(p)
        return [
            (per_rank, max(sum(p.numel() for p in ps) for ps in per_rank)) for per_rank in by_dtype.values()
        ]

    @torch.no_grad()
    def step(self, closure=None):
        """The inner step on this rank's tensors, then every tensor from its owner."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grad_scale, found_inf = scaler_inputs(self) if self._step_supports_amp_scaling else (None, None)
        handed = (
            {"grad_scale": grad_scale, "found_inf": found_inf}
            if grad_scale is not None or found_inf is not None
            else {}
        )
        clip_max = getattr(self.inner, "max_grad_norm", None)
        stand_ins = self._clipped_grads(clip_max, grad_scale) if clip_max else {}
        saved_grads = {p: p.grad for p in stand_ins}
        full_lists = [(group["params"], group.get("param_names")) for group in self.inner.param_groups]
        try:
            for group, owned in zip(self.inner.param_groups, self._owned_lists):
                if group.get("param_names") is not None:  # labels stay aligned with the tensors
                    group["param_names"] = [
                        n for p, n in zip(group["params"], group["param_names"]) if self.owner[p] == self.rank
                    ]
                group["params"] = owned
            for p, grad in stand_ins.items():
                p.grad = grad
            if clip_max:
                self.inner.max_grad_norm = None
            for name, value in handed.items():
                setattr(self.inner, name, value)
            self.inner.step()
        finally:
            for name in handed:
                self.inner.__dict__.pop(name, None)
            for group, (params, names) in zip(self.inner.param_groups, full_lists):
                group["params"] = params
                if names is not None:
                    group["param_names"] = names
            for p, grad in saved_grads.items():
                p.grad = grad
            if clip_max:
                self.inner.max_grad_norm = clip_max
        self._all_gather_weights()
        return loss

    def _clipped_grads(self, max_grad_norm: float, grad_scale: Tensor | None = None) -> dict:
        """LAMB's global clip: owned gradients times ``min(1, max / ||G||)``, ``||G||`` over all gradients in
        the order the unsharded optimizer takes them (so the factor is bitwise the same). Under AMP's scale the
        gradients are scaled and ``||G||`` is their norm divided by ``grad_scale``; the stand-ins stay scaled
        (the inner step unscales them)."""
        with_grad = [p for group in self.inner.param_groups for p in group["params"] if p.grad is not None]
        if not with_grad:
            return {}
        grads = [p.grad for p in with_grad]
        norms = torch.stack(torch._foreach_norm(grads, 2, dtype=math_dtype(with_grad + grads)))
        total = torch.linalg.vector_norm(norms)
        if grad_scale is not None:
            total = total / grad_scale.to(total.device, non_blocking=True)
        factor = (max_grad_norm / total).clamp(max=1.0)
        owned = [p for params in self._owned_lists for p in params if p.grad is not None]
        return dict(zip(owned, torch._foreach_mul([p.grad for p in owned], factor))) if owned else {}

    def _all_gather_weights(self) -> None:
        for per_rank, padded in self._gather_plan:
            if padded == 0:
                continue
            mine = per_rank[self.rank]
            numel = sum(p.numel() for p in mine)
            send = next(p for ps in per_rank for p in ps).new_empty(padded)  # one copy of the owned weights
            if mine:
                torch.cat([p.detach().reshape(-1) for p in mine], out=send[:numel])
            send[numel:].zero_()
            received = send.new_empty(padded * self.world_size)
            _all_gather(received, send, group=self.process_group)
            targets, sources = [], []
            for rank, params in enumerate(per_rank):
                if rank == self.rank or not params:
                    continue
                offset = rank * padded
                for p in params:
                    targets.append(p.detach())
                    sources.append(received[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
            if targets:
                torch._foreach_copy_(targets, sources)

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's state (collective; all ranks call it). ``to`` is accepted for ZeRO's signature;
        every rank ends up with the full state."""
        local = self.inner.state_dict()
        everyone: list = [None] * self.world_size
        dist.all_gather_object(everyone, local, group=self.process_group)
        params = [p for group in self.inner.param_groups for p in group["params"]]
        index_owner = {i: self.owner[p] for i, p in enumerate(params)}
        state = {
            i: everyone[index_owner[i]]["state"][i]
            for i in range(len(params))
            if i in everyone[index_owner[i]]["state"]
        }
        groups = []
        for k, group in enumerate(local["param_groups"]):
            first = group["params"][0] if group["params"] else None
            source = everyone[index_owner[first]] if first is not None else local
            groups.append(source["param_groups"][k])
        self._full_state = {"state": state, "param_groups": groups}

    def state_dict(self) -> dict:
        """The full (unsharded) state; call :meth:`consolidate_state_dict` on every rank first."""
        if self._full_state is None:
            raise RuntimeError(
                "ShardedUpdate.state_dict() needs consolidate_state_dict() on every rank first"
            )
        full, self._full_state = self._full_state, None
        return full

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a full (sharded or not) state, then drop the state of tensors other ranks own."""
        self.inner.load_state_dict(state_dict)
        for p, owner in self.owner.items():
            if owner != self.rank:
                self.inner.state.pop(p, None)
        self.param_groups = self.inner.param_groups
        self.state = self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)
