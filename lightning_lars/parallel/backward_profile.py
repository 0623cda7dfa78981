"""When each gradient is ready in backward: a deterministic profile from per-layer FLOPs, or a stored measured one.

:func:`count_costs` runs one forward and backward of ``timm.create_model(arch)`` on the ``meta`` device
(no memory, no arithmetic, same result on every machine) under ``torch.utils.flop_counter.FlopCounterMode``
and records, per leaf module in forward order, its forward FLOPs, the bytes of its output activation and the
parameters it owns. Backward FLOPs are twice the forward FLOPs (gradient of the input and of the weight, each
a convolution or matmul of the forward's size), once where the input needs no gradient (the stem); the flop
counter's own per-module backward attribution is not used: it charges one op to several modules.
:func:`timed_profile` turns these into seconds on a :class:`Device`:

    forward  = flops_fwd / flop_rate + 2 * activation_bytes / memory_bandwidth   # read input, write output
    backward = flops_bwd / flop_rate + 3 * activation_bytes / memory_bandwidth   # grad out, saved input, grad in

Backward visits the modules in reverse forward order; a module's parameters are ready when its backward
ends. The two constants 2 and 3 are our choice (elementwise layers move about that many activations).
The flop rate is calibrated against the seed's logged step time (:mod:`lightning_lars.parallel.planner`).
A profile measured on a GPU (:func:`measure_profile`, ``--save-profile``) can be stored and reused instead.
"""

import functools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lightning_lars.core.errors import UserError


@dataclass(frozen=True)
class Device:
    """Sustained rates of one accelerator: FLOP/s on convolutions and matmuls, memory bytes/s."""

    flop_rate: float
    memory_bandwidth: float


@dataclass(frozen=True)
class ModuleCost:
    name: str
    forward_flops: int
    backward_flops: int
    activation_bytes: int
    params: tuple  # (name, gradient bytes) of the parameters this module owns


@dataclass
class Profile:
    """Gradients in the order they become ready: fp32 bytes and seconds after backward starts."""

    arch: str
    batch_size: int
    source: str  # "flops" (computed) or "measured on <device>"
    forward_s: float
    backward_s: float
    names: list
    num_bytes: list
    ready_s: list

    def scaled(self, backward_s: float) -> "Profile":
        """The same profile with forward and ready times stretched so backward takes ``backward_s``."""
        factor = backward_s / self.backward_s
        return Profile(
            self.arch,
            self.batch_size,
            self.source,
            self.forward_s * factor,
            backward_s,
            self.names,
            self.num_bytes,
            [t * factor for t in self.ready_s],
        )


@functools.lru_cache(maxsize=8)
def count_costs(
    arch: str, batch_size: int, image_size: int = 224, activation_bytes: int = 2, num_classes: int = 1000
) -> tuple:
    """Per leaf module, in forward order: FLOPs (forward, backward), output bytes, owned parameters.

    ``activation_bytes`` per element (2: fp16/bf16 training). Gradient bytes are counted in fp32 (4 per
    element), the planner's wire factor converts them. Runs on ``meta``: nothing is computed or allocated.
    """
    # torch and timm take seconds to import: the planner's tables from stored profiles need neither
    import timm
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = timm.create_model(arch, pretrained=False, num_classes=num_classes)
        images = torch.empty(batch_size, 3, image_size, image_size)
    order, out_numel, input_grad = [], {}, {}

    def record(module, inputs, output, name):
        if name not in out_numel:
            order.append(name)
            out_numel[name] = output.numel() if isinstance(output, torch.Tensor) else 0
            input_grad[name] = any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)

    for name, module in model.named_modules():
        if not list(module.children()):
            module.register_forward_hook(functools.partial(record, name=name))
    prefix = type(model).__name__
    with FlopCounterMode(display=False, depth=None) as counter:
        model(images)
    forward = counter.get_flop_counts()
    modules = dict(model.named_modules())
    costs = []
    for name in order:
        key = f"{prefix}.{name}"
        fwd = sum(forward.get(key, {}).values())
        params = tuple(
            (f"{name}.{pname}", 4 * p.numel())
            for pname, p in modules[name].named_parameters(recurse=False)
            if p.requires_grad
        )
        costs.append(
            ModuleCost(
                name, fwd, (2 if input_grad[name] else 1) * fwd, activation_bytes * out_numel[name], params
            )
        )
    return tuple(costs)


def timed_profile(costs: tuple, device: Device, arch: str = "", batch_size: int = 0) -> Profile:
    """Seconds from counted costs (see module docstring); parameters in reverse forward order of modules."""

    def seconds(flops, moves, activation):
        return flops / device.flop_rate + moves * activation / device.memory_bandwidth

    forward_s = sum(seconds(c.forward_flops, 2, c.activation_bytes) for c in costs)
    clock, names, sizes, ready = 0.0, [], [], []
    for cost in reversed(costs):
        clock += seconds(cost.backward_flops, 3, cost.activation_bytes)
        for name, size in cost.params:
            names.append(name)
            sizes.append(size)
            ready.append(clock)
    return Profile(arch, batch_size, "flops", forward_s, clock, names, sizes, ready)


def flops_profile(arch: str, batch_size: int, device: Device, image_size: int = 224) -> Profile:
    """:func:`count_costs` timed on ``device``: the planner's default, deterministic profile."""
    return timed_profile(count_costs(arch, batch_size, image_size), device, arch, batch_size)


def measure_profile(arch: str, batch_size: int, image_size: int = 224, device: str = "cuda") -> Profile:
    """Time each gradient in a real backward (``register_post_accumulate_grad_hook``), to store and reuse.

    Meant for the GPU a recipe targets (``--measure cuda --save-profile FILE``); a CPU timing is not
    representative of a GPU and varies from run to run, which is why the planner never measures by default.
    """
    import timm  # torch and timm take seconds to import: only when a profile is measured
    import torch

    model = timm.create_model(arch, pretrained=False, num_classes=1000).to(device)
    images = torch.randn(batch_size, 3, image_size, image_size, device=device)
    labels = torch.randint(0, 1000, (batch_size,), device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    events = {}
    for name, param in model.named_parameters():
        param.register_post_accumulate_grad_hook(
            lambda p, name=name: (sync(), events.__setitem__(name, time.perf_counter()))
        )
    for _ in range(3):  # warm-up: allocator, cuDNN autotuning; keep the last
        model.zero_grad(set_to_none=True)
        sync()
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        sync()
        middle = time.perf_counter()
        loss.backward()
        sync()
        end = time.perf_counter()
    order = sorted(events, key=events.get)
    sizes = {name: 4 * p.numel() for name, p in model.named_parameters()}
    return Profile(
        arch,
        batch_size,
        f"measured on {device}",
        middle - start,
        end - middle,
        order,
        [sizes[n] for n in order],
        [events[n] - middle for n in order],
    )


def load_profile(path: Path) -> Profile:
    try:
        return Profile(**json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError) as error:
        raise UserError(
            f"cannot read profile {path}: {error}; record one with --measure cuda --save-profile FILE"
        ) from error


def save_profile(profile: Profile, path: Path) -> None:
    Path(path).write_text(json.dumps(asdict(profile)))
