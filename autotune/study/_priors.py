"""The prior table: device-aware first configs, measured right after the baseline.

Each row is the baseline with a few knobs changed, taken from what usually pays on
such a machine. A row is enqueued only where the machine has what it needs (CPU
flags are read from /proc/cpuinfo, never assumed) and the search space holds its
values (and the study's model takes them); rows that repeat the baseline or an
earlier row are dropped. Each is an ordinary trial that the sampler learns from,
raced like any other.

=====================  ==================================  ===============================
row                    applies when                        change from the baseline
=====================  ==================================  ===============================
gpu-resident-bf16      device cuda                         gpu_sampling on, bfloat16
                                                           autocast, no loader workers
gpu-resident           device cuda                         gpu_sampling on, no loader
                                                           workers
bf16                   CPU with amx_bf16 or avx512_bf16    bfloat16 autocast
sparse-aggregation     device cpu, a model that takes it   aggregation sparse (it loses on
                                                           CUDA)
bits-dropout           device cpu, a built-in model        dropout_masks bits (torch's
                                                           bernoulli_ is a large share of
                                                           a CPU step)
workers-on-free-cores  at least 2 cores                    one loader worker per core but
                                                           one (left to the training step)
in-process-sampling    always                              no loader workers (sampling in
                                                           the training process)
=====================  ==================================  ===============================

Compile is off in every row: a compiled variant is tried only after its eager twin
was measured (see ``loop.defer_compiled``).

Graph-level searches (task graph) take the same rows: the GPU-resident ones drop out
(a graph space has no ``gpu_sampling``), and the rest are what pays for whole-graph
batches too, while loader workers tie. Each row's figures: docs/benchmarks.md, "The
prior table".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from autotune.config import TrialConfig
from autotune.env import BF16_FLAGS, available_cores, cpu_flags
from autotune.errors import ConfigError
from autotune.study._space import FITTED_KNOBS, SearchSpace, in_space

@dataclass(frozen=True)
class Machine:
    device: str
    cores: int
    cpu_flags: frozenset[str]


@dataclass(frozen=True)
class Prior:
    name: str
    applies: Callable[[Machine], bool]
    change: Callable[[Machine], dict]


PRIORS = (
    Prior("gpu-resident-bf16", lambda m: m.device == "cuda",
          lambda m: {"gpu_sampling": True, "amp_dtype": "bfloat16", "num_workers": 0,
                     "sampling_backend": "builtin"}),
    Prior("gpu-resident", lambda m: m.device == "cuda",
          lambda m: {"gpu_sampling": True, "num_workers": 0, "sampling_backend": "builtin"}),
    Prior("bf16", lambda m: m.device == "cpu" and any(f in m.cpu_flags for f in BF16_FLAGS),
          lambda m: {"amp_dtype": "bfloat16"}),
    Prior("sparse-aggregation", lambda m: m.device == "cpu",
          lambda m: {"aggregation": "sparse"}),
    Prior("bits-dropout", lambda m: m.device == "cpu", lambda m: {"dropout_masks": "bits"}),
    Prior("workers-on-free-cores", lambda m: m.cores >= 2,
          lambda m: {"num_workers": m.cores - 1}),
    Prior("in-process-sampling", lambda m: True, lambda m: {"num_workers": 0}),
)


def machine_facts(device: str) -> Machine:
    return Machine(device, len(available_cores()), cpu_flags())


def prior_configs(baseline: TrialConfig, space: SearchSpace,
                  machine: Machine) -> list[tuple[str, TrialConfig]]:
    """The rows of :data:`PRIORS` that apply here, as configs the space holds: where
    the baseline's value of a knob lies outside the space's file (``space.outside``),
    a row takes the space's nearest value instead, so that even a search of a few
    trials measures the user's space."""
    out, seen = [], {baseline.replace(loader_cores=None, compute_cores=None).key()}
    inside = {name: near for name, (_, near) in space.outside.items() if name in FITTED_KNOBS}
    for prior in PRIORS:
        if not prior.applies(machine):
            continue
        try:
            config = baseline.replace(compile_mode="none", loader_cores=None,
                                      compute_cores=None, **{**inside, **prior.change(machine)})
        except ConfigError:  # the study's model refuses the change (gcn: sparse aggregation)
            continue
        if in_space(config, space) and config.key() not in seen:
            seen.add(config.key())
            out.append((prior.name, config))
    return out
