"""Facts about the machine a trial runs on: cores, CPU model, versions, sizes, and
how fast it computes bfloat16 (:func:`bf16_matmul_gain`); and how a process of
autotune's ends (:func:`end_quickly`)."""
from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import os
import platform
import re
import socket
import statistics
import time
from functools import lru_cache
from pathlib import Path

from autotune.errors import ConfigError

_UNITS = {"b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2,
          "gib": 1024**3, "tib": 1024**4}


@lru_cache(maxsize=1)
def end_quickly() -> None:
    """Has this process end without the interpreter's last garbage collections, which
    walk every object torch and PyG made (``benchmarks/exit.py`` measures what they
    cost a command and a fresh trial): at exit the objects left are frozen out of
    them (``gc.freeze``). Objects still go when their last reference does, so files
    are flushed and closed as before; only objects in reference cycles are left to
    the process's end, whose finalizers Python never promised to run at exit. Called
    where a command or a trial's process starts; once a process."""
    atexit.register(gc.freeze)


def parse_bytes(text: str | int, *, option: str = "size") -> int:
    """'8GiB', '512MiB', '2GB' (or an int, in Python) -> bytes. A string needs its
    unit: a bare '8' read as 8 bytes made every trial infeasible without a word."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        unit = match.group(2).lower() if match else None
        if match is not None and unit == "":
            number = match.group(1)
            raise ConfigError(f"{option} {text}: give a unit, e.g. {number}GiB or "
                              f"{float(number) * 1000:.0f}MB (KiB/MiB/GiB are powers of 1024, "
                              "KB/MB/GB of 1000; a bare number would be bytes)")
        if match is None or unit not in _UNITS:
            raise ConfigError(f"{option} must be a size such as 8GiB, 512MiB or 2GB "
                              f"(got {text!r})")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ConfigError(f"{option} must be positive (got {text!r})")
    return value


_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str | float | int, *, zero: bool = False) -> float:
    """Seconds from a number or '90', '90s', '15m', '2h', '1.5h'; ValueError if not
    a positive duration (or, with ``zero``, a duration of 0)."""
    import re

    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text > 0 or zero and text == 0:
            return float(text)
        raise ValueError(text)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", str(text))
    if match is None or not (float(match.group(1)) > 0 or zero):
        raise ValueError(text)
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def parse_fraction(text: str | float, upto_one: bool = False) -> float:
    """A fraction in (0, 1) (``upto_one``: (0, 1]) from 0.03, '0.03' or '3%';
    ValueError if not."""
    if isinstance(text, str) and text.strip().endswith("%"):
        value = float(text.strip()[:-1]) / 100
    else:
        value = float(text)
    if not (0 < value <= 1 if upto_one else 0 < value < 1):
        raise ValueError(text)
    return value


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 config``, ``2 configs`` (``many``: the plural where it is not word + s)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def writable_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is, or could be created as, a folder we may write in. A
    folder whose mode grants no write bit counts as read-only even for root, who
    could write there anyway (shared data folders are marked that way)."""
    for folder in (Path(path), *Path(path).parents):
        if folder.exists():
            return (folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)
                    and bool(folder.stat().st_mode & 0o222))
    return False


def make_writable_dir(path: str | os.PathLike, option: str) -> Path:
    """``path`` created if need be; a folder autotune may not write in is a one-line
    error naming ``option`` (say ``--studies-dir (studies_dir=)``)."""
    path = Path(path)
    if not writable_dir(path):
        raise ConfigError(f"{option} '{path}' is not writable; pass another folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} '{path}' cannot be created: {exc.strerror}") from exc
    return path


def available_cores() -> list[int]:
    """The cores this process may run on."""
    return sorted(os.sched_getaffinity(0))


@lru_cache(maxsize=1)
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where unreadable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


# A CPU with one of these computes bfloat16 natively (oneDNN's AMX and AVX-512 bf16
# kernels); elsewhere it is emulated, and autocast to it trains slower than float32
# (a Cascade Lake Xeon without avx512_bf16; an AVX2-only EPYC, docs/benchmarks.md)
BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (:data:`BF16_FLAGS`)."""
    return any(flag in cpu_flags() for flag in BF16_FLAGS)


# The linear layer bf16_matmul_gain times: a GNN layer's size (a few thousand nodes
# of a few hundred features into 256), and the median of this many runs a dtype
PROBE_SHAPE = (4096, 512, 256)
PROBE_RUNS = 5


@lru_cache(maxsize=1)
def bf16_matmul_gain() -> float:
    """How much faster a linear layer runs under bfloat16 autocast than in float32 on
    this CPU (over 1: faster), measured once a process: the median of
    :data:`PROBE_RUNS` runs of each, interleaved, after one of each to warm up (about
    0.1 s in all). Autocast on a CPU lowers only such layers (linear, matmul,
    convolution), so where this is under 1 bfloat16 autocast cannot speed up a step:
    a CPU with avx512_bf16 may still compute it slower than float32 (a Xeon without
    AMX: docs/knobs.md). A run that tries precision asks it, and so do a search's
    prior rows (``autotune.study._priors``)."""
    import torch  # a machine fact that costs torch: only where asked

    m, k, n = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    x, weight = torch.randn(m, k, generator=generator), torch.randn(n, k, generator=generator)

    def seconds(bf16: bool) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            torch.nn.functional.linear(x, weight)
        return time.perf_counter() - start

    times: dict[bool, list[float]] = {False: [], True: []}
    for run in range(PROBE_RUNS + 1):
        for bf16 in (False, True):
            elapsed = seconds(bf16)
            if run:  # the first of each warms up
                times[bf16].append(elapsed)
    return statistics.median(times[False]) / statistics.median(times[True])


# The flags that decide the code inductor generates for a CPU: its vector width (AVX2's
# 8 float lanes, AVX-512's 16) and its AMX and bf16/fp16 kernels.
ISA_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")


def isa_key() -> str:
    """A name for the code inductor generates on this CPU: the architecture and a
    digest of its :data:`ISA_FLAGS` and of ``ATEN_CPU_CAPABILITY`` (which lowers the
    ISA inductor picks), e.g. ``x86_64-3f9a0c21``."""
    parts = [f for f in ISA_FLAGS if f in cpu_flags()]
    parts.append(f"aten={os.environ.get('ATEN_CPU_CAPABILITY', '').lower()}")
    return f"{platform.machine()}-{hashlib.sha1(' '.join(parts).encode()).hexdigest()[:8]}"


# The flags that decide how fast a CPU trains in bfloat16 (oneDNN's AMX and AVX-512
# bf16 kernels): recorded with every trial, since machines of one model name differ.
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_features() -> list[str]:
    """The :data:`SPEED_FLAGS` this CPU has, in that order."""
    return [f for f in SPEED_FLAGS if f in cpu_flags()]


def check_cores(name: str, cores: tuple[int, ...] | None) -> None:
    """Rejects a core set that names a core this machine (or this process) lacks."""
    if cores is None:
        return
    allowed = set(available_cores())
    missing = sorted(set(cores) - allowed)
    if missing:
        raise ConfigError(f"{name} names cores {missing} that this machine does not offer "
                          f"(available: {sorted(allowed)})")


def fingerprint(device: str = "cpu") -> dict:
    """Versions and hardware, recorded with every trial and export. Optuna's version
    is read from its installed metadata: a trial's process imports nothing else of
    optuna's, and every trial would pay for its import outside its window."""
    from importlib import metadata

    import psutil
    import torch
    import torch_geometric

    gpu = None
    if device == "cuda" and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
    return {
        "autotune": __import__("autotune").__version__,
        "torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
        "optuna": metadata.version("optuna"), "python": platform.python_version(),
        "cpu": cpu_model(), "cpu_features": cpu_features(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "available_cores": len(available_cores()),
        "memory_bytes": psutil.virtual_memory().total,
        "gpu": gpu, "cuda": torch.version.cuda,
        "trial_start_method": "forked from autotune.trial._forkserver in a search, else a fresh "
                              "interpreter (observed.trial_start says which)",
        "loader_start_method": torch.multiprocessing.get_start_method(allow_none=True) or "fork",
        "host": socket.gethostname(),
    }


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def install_hint(extra: str) -> str:
    """The command that adds ``extra`` (``ogb``, ``postgres``) to autotune as it was
    installed: from its source folder where pip installed it from one (``pip install
    -e '/path/to/autotune[ogb]'``), else from the index."""
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    where = {}  # a source folder's autotune.egg-info may be found first: it has none
    for dist in metadata.distributions(name="autotune"):
        with contextlib.suppress(ValueError):
            where = where or json.loads(dist.read_text("direct_url.json") or "{}")
    url = where.get("url", "")
    if url.startswith("file://"):
        folder = unquote(urlparse(url).path)
        editable = "-e " if where.get("dir_info", {}).get("editable") else ""
        return f"pip install {editable}'{folder}[{extra}]'"
    return f"pip install 'autotune[{extra}]'"
