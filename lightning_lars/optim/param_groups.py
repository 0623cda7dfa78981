"""Which parameters skip weight decay and the trust ratio: one visible rule.

The rule is ``excluded(p) = p.ndim <= 1``: BatchNorm/LayerNorm gamma and beta and every bias are 1-D, every
conv and linear weight is not (nanoGPT's ``p.dim() >= 2``). MLPerf and the LAMB ResNet-50 run exclude exactly
these tensors from weight decay and from layer-wise adaptation; You et al. 2017 adapt every tensor
(``rule="none"``). The LAMB authors' ResNet-50 code excludes only its ``batch_normalization`` variables, so the
FC bias is decayed and adapted there: ``rule="norm_layers"`` excludes exactly the parameters of normalisation
modules (found by module type). No name matching (``'bn' in name``): a renamed layer cannot change the rule.

Groups carry ``param_names`` (the key ``torch.optim.Optimizer`` itself uses for named parameters), so a
callback can label per-layer statistics, and ``trust_adaptation`` (bool), read by LARS and LAMB and ignored by
SGD.

The rule reads the shape a parameter had before any sharding. FSDP2 (DTensor) parameters keep their global
shape. FSDP1 with ``use_orig_params=True`` (Lightning wraps the model *before* ``configure_optimizers``)
turns every parameter into a 1-D slice of a flat shard, or an empty tensor on ranks that hold none of it:
``param_groups`` reads the original shapes from FSDP1's own metadata (`record_unsharded_shapes`) and refuses
a flattened parameter whose shape it cannot find, instead of silently excluding it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lightning_lars.core.errors import UserError

RULES = ("ndim<=1", "none", "norm_layers")
NORM_LAYERS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)  # BN (all dims, Sync), LN, GN
UNSHARDED_SHAPE = "_lightning_lars_unsharded_shape"  # attribute set on FSDP1-flattened parameters
FSDP1_PREFIX = "_fsdp_wrapped_module."  # what FSDP1 inserts into parameter names


def shape(p: Tensor) -> torch.Size:
    """``p``'s shape before FSDP1 flattened it (see `record_unsharded_shapes`), else its own shape."""
    return getattr(p, UNSHARDED_SHAPE, p.shape)


def excluded(p: Tensor) -> bool:
    """True for tensors that skip weight decay and the trust ratio: BN gamma/beta, biases (``ndim <= 1``)."""
    return len(shape(p)) <= 1


def record_unsharded_shapes(model: nn.Module) -> int:
    """Tag every parameter that an FSDP1 unit inside ``model`` (or ``model`` itself) flattened with its original
    shape, read from the unit's flat parameter (``_params``/``_shapes``: FSDP1's own bookkeeping, private but
    stable since torch 2.0). Needs ``use_orig_params=True``. Returns the number of parameters tagged."""
    from torch.distributed.fsdp import FullyShardedDataParallel  # FSDP only for FSDP runs (slow to import)

    tagged = 0
    for unit in FullyShardedDataParallel.fsdp_modules(model):
        handle = getattr(unit, "_handle", None)
        if handle is None:  # a unit that owns no parameters of its own
            continue
        flat = handle.flat_param
        if flat._params is None:
            raise UserError(
                "FSDP1 with use_orig_params=False hands the optimizer flat shards, not parameters;"
                " LARS/LAMB need use_orig_params=True (strategy=fsdp1 sets it)"
            )
        for param, original in zip(flat._params, flat._shapes):
            setattr(param, UNSHARDED_SHAPE, torch.Size(original))
            tagged += 1
    return tagged


def _check_shapes_known(named: list[tuple[str, Tensor]]) -> None:
    # FSDP1 marks the parameters it flattened (FSDP2 does not: its DTensors keep their shape)
    unknown = [
        n for n, p in named if getattr(p, "_fsdp_flattened", False) and not hasattr(p, UNSHARDED_SHAPE)
    ]
    if unknown:
        raise UserError(
            f"{len(unknown)} parameters (first: {unknown[0]}) were flattened by an FSDP1 unit outside"
            " this module, so the exclusion rule cannot see their shapes: use strategy=fsdp1, or call"
            " lightning_lars.optim.param_groups.record_unsharded_shapes(root) after wrapping"
        )


def param_groups(model: nn.Module, weight_decay: float, rule: str = "ndim<=1") -> list[dict]:
    """Split ``model``'s trainable parameters into an adapted group and an excluded group.

    Args:
        model: the module whose ``named_parameters()`` (``requires_grad`` only) are grouped, in order.
        weight_decay: decay of the adapted group; the excluded group always gets 0.0.
        rule: ``"ndim<=1"`` (default; MLPerf, LAMB) excludes BN and bias tensors via ``excluded``;
            ``"none"`` (You et al. 2017) decays and adapts every tensor; ``"norm_layers"`` (LAMB authors'
            code, ``exclude_from_weight_decay=["batch_normalization", ...]``) excludes only the parameters of
            normalisation modules (``NORM_LAYERS``): biases of conv/linear layers are decayed and adapted.

    Returns:
        Non-empty groups, each a dict with ``params``, ``param_names``, ``weight_decay`` and
        ``trust_adaptation``; adapted group first.
    """
    if rule not in RULES:
        raise UserError(f"unknown param-group rule {rule!r}; set optimizer rule to one of {', '.join(RULES)}")
    record_unsharded_shapes(model)
    named = [(name.replace(FSDP1_PREFIX, ""), p) for name, p in model.named_parameters() if p.requires_grad]
    _check_shapes_known(named)
    norm_params = {id(p) for m in model.modules() if isinstance(m, NORM_LAYERS) for p in m.parameters(False)}
    skip = [
        (rule == "ndim<=1" and excluded(p)) or (rule == "norm_layers" and id(p) in norm_params)
        for _, p in named
    ]
    adapted = [(n, p) for (n, p), s in zip(named, skip) if not s]
    rest = [(n, p) for (n, p), s in zip(named, skip) if s]
    groups = [
        _group(adapted, weight_decay=weight_decay, trust_adaptation=True),
        _group(rest, weight_decay=0.0, trust_adaptation=False),
    ]
    return [g for g in groups if g["params"]]


def _group(named: list[tuple[str, Tensor]], **options) -> dict:
    return {"params": [p for _, p in named], "param_names": [n for n, _ in named], **options}


def split_unresolved(group: dict, adapt_all: bool) -> list[dict]:
    """Resolve a group whose ``trust_adaptation`` is missing or None (e.g. plain ``model.parameters()``).

    With ``adapt_all`` (LARS form ``"you2017"``) the whole group is adapted and decayed. Otherwise it is split
    by ``excluded``: the excluded part gets ``weight_decay=0.0, trust_adaptation=False`` (the MLPerf default).
    A group that states ``trust_adaptation`` is returned unchanged: an explicit choice always wins.
    """
    if group.get("trust_adaptation") is not None:
        return [group]
    params = list(group["params"])
    if params and isinstance(params[0], tuple):  # named parameters: (name, tensor) pairs
        names, params = [n for n, _ in params], [p for _, p in params]
    else:
        names = group.get("param_names")
    if adapt_all:
        return [{**group, "params": params, "trust_adaptation": True}]
    parts = []
    for skip in (False, True):
        idx = [i for i, p in enumerate(params) if excluded(p) == skip]
        if not idx:
            continue
        part = {**group, "params": [params[i] for i in idx], "trust_adaptation": not skip}
        if skip:
            part["weight_decay"] = 0.0
        if names is not None:
            part["param_names"] = [names[i] for i in idx]
        parts.append(part)
    return parts
