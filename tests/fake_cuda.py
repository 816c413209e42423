"""A GPU that torch's own ``torch.cuda`` wrappers talk to, on a machine without one.

The CUDA build's C entry points (``torch._C._cuda_*``, the runtime module
``torch.cuda._cudart`` and the ``_get_device_properties`` that ``_cuda_init``
defines) are stubbed here; the Python wrappers in ``torch.cuda`` are not. So
``torch.cuda.is_available()``, the lazy initialisation, ``_get_device_index`` and
every argument check the wrappers make run as on a GPU machine: a call that gives a
memory-fraction function ``torch.device("cuda")`` raises torch's own ``ValueError``
here too. The stubs take a device index only, as the C++ bindings do, and record
each call, so a test can assert what reached the "driver".

No tensor can be put on this device: a test drives the host logic that runs before
anything is allocated (the fit check, the cap, the memory figures a trial stores).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import torch

GIB = 1 << 30


@dataclass
class FakeGpu:
    """The device's state as the stubbed entry points report and change it."""

    total: int = 80 * GIB
    free: int = 79 * GIB
    reserved: int = 0
    peak_reserved: int = 0
    allocated: int = 0
    peak_allocated: int = 0
    fraction: float = 1.0
    name: str = "Fake H100 (tests/fake_cuda.py)"
    calls: list[tuple] = field(default_factory=list)

    def _index(self, entry: str, device) -> int:
        # pybind11 refuses anything but an int where the binding takes a DeviceIndex
        if type(device) is not int:
            raise TypeError(f"{entry}(): incompatible function arguments: expected a "
                            f"device index (int), got {device!r}")
        if device != 0:
            raise RuntimeError(f"{entry}: invalid device ordinal {device}")
        self.calls.append((entry, device))
        return device

    # torch._C entry points
    def get_device_count(self) -> int:
        return 1

    def init(self) -> None:
        """What the binding's ``_cuda_init`` does that the wrappers rely on: one
        default generator per device (``torch.manual_seed`` seeds them)."""
        self.calls.append(("_cuda_init",))
        torch.cuda.default_generators = (torch.Generator(),)

    def get_device(self) -> int:
        return 0

    def exchange_device(self, device: int) -> int:
        if device >= 0:
            self._index("_cuda_exchangeDevice", device)
        return 0

    def set_memory_fraction(self, fraction: float, device) -> None:
        self._index("_cuda_setMemoryFraction", device)
        self.fraction = fraction

    def get_memory_fraction(self, device) -> float:
        self._index("_cuda_getMemoryFraction", device)
        return self.fraction

    def memory_stats(self, device) -> dict:
        self._index("_cuda_memoryStats", device)

        def stat(current: int, peak: int) -> dict:
            return {"all": {"current": current, "peak": peak, "allocated": peak, "freed": 0}}

        return {"reserved_bytes": stat(self.reserved, self.peak_reserved),
                "allocated_bytes": stat(self.allocated, self.peak_allocated)}

    def reset_peak_memory_stats(self, device) -> None:
        self._index("_cuda_resetPeakMemoryStats", device)
        self.peak_reserved, self.peak_allocated = self.reserved, self.allocated

    def properties(self, device) -> SimpleNamespace:
        self._index("_get_device_properties", device)
        return SimpleNamespace(name=self.name, total_memory=self.total, major=9, minor=0,
                               multi_processor_count=132)

    def mem_get_info(self, device) -> tuple[int, int]:
        self._index("cudaMemGetInfo", device)
        return self.free, self.total


@pytest.fixture
def fake_cuda(monkeypatch) -> FakeGpu:
    """One fake GPU behind torch's real ``torch.cuda`` wrappers (see the module)."""
    gpu = FakeGpu()
    c = torch.cuda
    entries = {"_cuda_getDeviceCount": gpu.get_device_count, "_cuda_init": gpu.init,
               "_cuda_getDevice": gpu.get_device, "_cuda_exchangeDevice": gpu.exchange_device,
               "_cuda_maybeExchangeDevice": gpu.exchange_device,
               "_cuda_setMemoryFraction": gpu.set_memory_fraction,
               "_cuda_getMemoryFraction": gpu.get_memory_fraction,
               "_cuda_memoryStats": gpu.memory_stats,
               "_cuda_resetPeakMemoryStats": gpu.reset_peak_memory_stats}
    for name, stub in entries.items():
        monkeypatch.setattr(torch._C, name, stub, raising=False)
    monkeypatch.setattr(c, "_cudart", SimpleNamespace(cudaMemGetInfo=gpu.mem_get_info))
    monkeypatch.setattr(c, "_get_device_properties", gpu.properties, raising=False)
    monkeypatch.setattr(c, "_exchange_device", gpu.exchange_device, raising=False)
    monkeypatch.setattr(c, "_maybe_exchange_device", gpu.exchange_device, raising=False)
    # the lazy initialisation runs afresh, and is undone after the test
    monkeypatch.setattr(c, "_initialized", False)
    monkeypatch.setattr(c, "_cached_device_count", None)
    monkeypatch.setattr(c, "_queued_calls", [])
    monkeypatch.setattr(c, "_lazy_seed_tracker", type(c._lazy_seed_tracker)())
    monkeypatch.setattr(c, "default_generators", ())
    monkeypatch.setattr(c, "_tls", threading.local())
    monkeypatch.setattr(c, "_is_in_bad_fork", lambda: False)  # a C entry point too
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    return gpu
