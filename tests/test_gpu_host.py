"""The GPU-resident pipeline's host logic, run in CI through torch's own ``torch.cuda``
wrappers over a stubbed device (tests/fake_cuda.py): the fit check, the cap, the
memory figures a trial stores. torch's argument checks run as on a GPU machine, so a
call that drops a device index fails here as it failed on the H100."""
from __future__ import annotations

import pytest
import torch

from autotune.config import TrialConfig
from autotune.errors import ConfigError, DeviceMemoryError
from autotune.pipeline import build, check_config, gpu_room, limit_gpu_memory
from autotune.pipeline._build import batch_working_bytes, gpu_need, gpu_resident_bytes
from fake_cuda import GIB

CUDA = torch.device("cuda")  # as the worker builds it: no index


def resident(**changes) -> TrialConfig:
    return TrialConfig(device="cuda", gpu_sampling=True, sampling_backend="builtin", batch_size=64,
                       num_neighbors=(5, 3), hidden_channels=32, **changes)


def test_the_stand_in_runs_torchs_own_argument_checks(fake_cuda):
    """What the fixture is for: torch's wrappers, not stubs of them, so a device
    without an index is refused exactly as torch refuses it on a GPU."""
    assert torch.cuda.is_available() and torch.cuda.device_count() == 1
    with pytest.raises(ValueError, match="Expected a torch.device with a specified index"):
        torch.cuda.get_per_process_memory_fraction(CUDA)
    with pytest.raises(ValueError, match="Expected a torch.device with a specified index"):
        torch.cuda.set_per_process_memory_fraction(0.5, CUDA)
    assert torch.cuda.get_per_process_memory_fraction(0) == 1.0


def test_gpu_room_reads_the_device_and_then_its_cap(fake_cuda):
    fake_cuda.free, fake_cuda.total = 70 * GIB, 80 * GIB
    assert gpu_room(CUDA) == (70 * GIB, 80 * GIB)
    limit_gpu_memory(4 * GIB, CUDA)
    assert fake_cuda.fraction == pytest.approx(4 / 80)
    fake_cuda.reserved = GIB
    assert gpu_room(CUDA) == (3 * GIB, 4 * GIB)  # the cap, less what torch holds
    assert ("_cuda_setMemoryFraction", 0) in fake_cuda.calls


def test_a_cap_above_the_gpu_is_refused(fake_cuda):
    with pytest.raises(ConfigError, match=r"--gpu-memory-limit .* more than the GPU has"):
        limit_gpu_memory(81 * GIB, CUDA)
    assert fake_cuda.fraction == 1.0


def test_gpu_sampling_that_does_not_fit_fails_before_building(tiny_synthetic, fake_cuda):
    """check_config sees the device; the fit check runs on the stand-in's figures and
    refuses before anything is put on the GPU (a CUDA tensor would fail here)."""
    check_config(resident())
    need = sum(gpu_need(resident(), tiny_synthetic, 4).values())
    fake_cuda.free = need // 2
    with pytest.raises(DeviceMemoryError, match="gpu_sampling needs"):
        build(resident(), tiny_synthetic, num_classes=4)
    assert not any(c[0] == "_cuda_setMemoryFraction" for c in fake_cuda.calls)


def test_under_a_cap_the_fit_check_names_pinned_features(tiny_synthetic, fake_cuda):
    """A cap that holds the graph and the batches but not the features too: resident
    features are refused with pinned named, and pinned ones pass the check (and then
    fail only where a tensor is put on the stand-in device)."""
    config = resident()
    need = gpu_need(config, tiny_synthetic, 4)
    without = sum(v for k, v in need.items() if k != "features")
    cap = int((without + need["features"] // 2) / 0.95)
    limit_gpu_memory(cap, CUDA)
    with pytest.raises(DeviceMemoryError, match="use feature_placement pinned"):
        build(config, tiny_synthetic, num_classes=4)
    pinned = resident(feature_placement="pinned")
    assert "features" not in gpu_need(pinned, tiny_synthetic, 4)
    with pytest.raises(Exception) as raised:
        build(pinned, tiny_synthetic, num_classes=4)
    assert not isinstance(raised.value, DeviceMemoryError)


def test_the_working_set_counts_each_batchs_messages(tiny_synthetic):
    """Scatter aggregation holds a message per sampled edge of the layer's input
    width; the sparse product does not, and bfloat16 storage adds the stored copy."""
    scatter = batch_working_bytes(resident(), tiny_synthetic, 4)
    sparse = batch_working_bytes(resident(aggregation="sparse"), tiny_synthetic, 4)
    edges = 64 * 5 + 64 * 5 * 3
    width = tiny_synthetic.num_features
    assert scatter["activations"] - sparse["activations"] == \
        edges * (width + 32) * 4 - edges * 3 * 8
    bf16 = batch_working_bytes(resident(feature_dtype="bfloat16"), tiny_synthetic, 4)
    assert bf16["batches"] > scatter["batches"]
    assert set(gpu_resident_bytes(tiny_synthetic)) <= set(gpu_need(resident(),
                                                                         tiny_synthetic, 4))


def test_a_trials_memory_figures_come_from_the_device(fake_cuda):
    """What measure stores on CUDA: torch's peaks, the device's memory within its cap
    (the memory objective counts against it) and the fit check's count."""
    from types import SimpleNamespace

    from autotune.trial._window import _device_memory, _peak_mib

    fake_cuda.reserved = fake_cuda.peak_reserved = 3 * GIB
    fake_cuda.peak_allocated = 2 * GIB
    limit_gpu_memory(8 * GIB, CUDA)
    torch.cuda.reset_peak_memory_stats(CUDA)
    figures = _device_memory(SimpleNamespace(device=CUDA, gpu_fit_bytes=123))
    assert figures["cuda_max_reserved_bytes"] == 3 * GIB
    assert figures["device_total_bytes"] == 8 * GIB
    assert figures["gpu_fit_bytes"] == 123
    assert _peak_mib(CUDA, None) == 3 * 1024


def test_cuda_trials_count_devices_through_nvml(monkeypatch):
    """The fork server's imports may ask torch.cuda.is_available(); through NVML that
    leaves the driver alone, so forked CUDA trials keep working."""
    from autotune.trial._runner import trial_env

    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    assert trial_env("cuda")["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in trial_env("cpu")
    assert trial_env("cuda", {"PYTORCH_NVML_BASED_CUDA_CHECK": "0"})[
        "PYTORCH_NVML_BASED_CUDA_CHECK"] == "0"  # the user's choice stands
