"""One device setting, one precision setting and one thread count, with one meaning everywhere.

``device``: ``auto`` (CUDA when torch sees a GPU, else the CPU), ``cpu``, ``cuda`` (the first
GPU) or ``cuda:N``. ``precision``: ``auto`` (bf16 on a CUDA device that supports it, fp32
otherwise), ``fp32``, or ``bf16`` (also on the CPU, where it is asked for: slower there, and it
is what a test of the bf16 path runs on a machine without a GPU). ``torch_threads``: 1 to 1024
(``TorchThreads``; each config keeps its own default).

The configs (pipeline, video, MPC, trainer, services) check the *spelling* when they load
(``check_device``, ``check_precision``: no torch import, so ``--help`` and config checks stay
instant); ``resolve_device`` checks that the device exists, once, at the start of the process
that uses it, and turns ``auto`` and ``cuda`` into a concrete ``cpu`` or ``cuda:N``, which is
what a run hands its processes. ``DeviceUnavailable`` says what to set instead.

Each process that runs torch work logs ``device_line(...)`` once it has placed its model, and
``read_device_line`` reads it back from that log (``rlvr-world run`` records every process's
device that way in ``summary.json``). This module does not move tensors and holds no state.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field

if TYPE_CHECKING:
    import torch

#: Spellings of a device setting.
DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:(0|[1-9][0-9]{0,2}))$")
#: Spellings of a precision setting.
PRECISIONS = ("auto", "fp32", "bf16")
PrecisionName = Literal["auto", "fp32", "bf16"]
#: The line a process logs with the device and precision its torch work uses.
_LINE = "device in use: {device}, precision {precision}"
_LINE_RE = re.compile(r"device in use: (\S+), precision (\w+)")


class DeviceUnavailable(ValueError):
    """The device asked for does not exist on this machine (the message says what to set)."""


def check_device(value: str) -> str:
    """``value`` when it is a device spelling (module docstring); ``ValueError`` otherwise."""
    if not isinstance(value, str) or not DEVICE_RE.match(value):
        raise ValueError(
            f"device {value!r}: expected auto, cpu, cuda or cuda:N (N a GPU index, e.g. cuda:0)"
        )
    return value


def check_precision(value: str) -> str:
    """``value`` when it is a precision spelling; ``ValueError`` otherwise."""
    if value not in PRECISIONS:
        raise ValueError(f"precision {value!r}: expected one of {', '.join(PRECISIONS)}")
    return value


#: A config field's type: a device spelling, checked at load.
DeviceName = Annotated[str, AfterValidator(check_device)]
#: A config field's type: torch intra-op threads of the process (``torch.set_num_threads``); one
#: bound for every config that sets it (each keeps its own default).
TorchThreads = Annotated[
    int, Field(ge=1, le=1024, description="torch intra-op threads (torch.set_num_threads)")
]


def _no_cuda_reason() -> str:
    import torch

    built = torch.version.cuda
    if built is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    return f"torch {torch.__version__} (CUDA {built}) sees no CUDA device"


def resolve_device(name: str, setting: str = "device") -> str:
    """The concrete device ``name`` stands for here: ``cpu`` or ``cuda:N``.

    ``auto`` is ``cuda:0`` where torch sees a GPU, else ``cpu``; ``cuda`` is ``cuda:0``.
    ``DeviceUnavailable`` (naming ``setting``) for a CUDA device this machine does not have;
    ``ValueError`` for a bad spelling. Imports torch only for ``auto`` and CUDA names."""
    check_device(name)
    if name == "cpu":
        return "cpu"
    import torch

    available = torch.cuda.is_available()
    if name == "auto":
        return "cuda:0" if available else "cpu"
    if not available:
        raise DeviceUnavailable(
            f"{setting} {name}: {_no_cuda_reason()}; set {setting} to cpu (or auto: CUDA "
            "where there is a GPU, else the CPU)"
        )
    index = int(name.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceUnavailable(
            f"{setting} {name}: this machine has {count} CUDA device(s) (cuda:0 to "
            f"cuda:{count - 1})"
        )
    return f"cuda:{index}"


def resolve_precision(precision: str, device: str) -> Literal["fp32", "bf16"]:
    """``fp32`` or ``bf16`` for a resolved ``device``: ``auto`` is bf16 on a CUDA device that
    supports it, fp32 elsewhere; ``bf16`` on a CUDA device without bf16 support is refused
    (``DeviceUnavailable``); on the CPU it is honoured."""
    check_precision(precision)
    cuda = device.startswith("cuda")
    if precision == "fp32" or (precision == "auto" and not cuda):
        return "fp32"
    if not cuda:
        return "bf16"
    import torch

    supported = bool(torch.cuda.is_bf16_supported())
    if precision == "auto":
        return "bf16" if supported else "fp32"
    if not supported:
        raise DeviceUnavailable(
            f"precision bf16: {torch.cuda.get_device_name(device)} does not support bf16; set "
            "precision to fp32 (or auto)"
        )
    return "bf16"


@dataclass(frozen=True)
class Placement:
    """A resolved device (``cpu`` or ``cuda:N``) and precision (``fp32`` or ``bf16``): where a
    run's phases and processes put their torch work, and in what precision."""

    device: str
    precision: Literal["fp32", "bf16"]

    @classmethod
    def resolve(cls, device: str, precision: str, setting: str = "run.device") -> Placement:
        """``resolve_device`` and ``resolve_precision`` of the settings (errors name
        ``setting``)."""
        concrete = resolve_device(device, setting)
        return cls(concrete, resolve_precision(precision, concrete))

    def as_dict(self) -> dict[str, str]:
        """``{"device": ..., "precision": ...}`` for logs and reports."""
        return {"device": self.device, "precision": self.precision}


def autocast(
    device: torch.device | str, precision: str
) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on ``device`` when ``precision`` is ``bf16`` (CPU or CUDA); a no-op for
    ``fp32``. ``precision`` must be resolved (``resolve_precision``)."""
    import torch

    if precision == "bf16":
        kind = device.type if isinstance(device, torch.device) else str(device).partition(":")[0]
        return torch.autocast(device_type=kind, dtype=torch.bfloat16)
    if precision != "fp32":
        raise ValueError(f"precision {precision!r}: resolve it first (fp32 or bf16)")
    return contextlib.nullcontext()


def weights_dtype(precision: str) -> Literal["float32", "bfloat16"]:
    """The dtype name an inference engine loads its weights in for a resolved precision."""
    return "bfloat16" if precision == "bf16" else "float32"


def module_device(module: torch.nn.Module) -> str:
    """The device of a module's first parameter (``cpu`` or ``cuda:N``)."""
    return str(next(module.parameters()).device)


def device_line(device: str, precision: str) -> str:
    """The log line naming the device and precision a process's torch work uses."""
    return _LINE.format(device=device, precision=precision)


def read_device_line(text: str) -> tuple[str, str] | None:
    """``(device, precision)`` of the last ``device_line`` in ``text`` (a log); None without."""
    found = _LINE_RE.findall(text)
    if not found:
        return None
    device, precision = found[-1]
    return str(device), str(precision)
