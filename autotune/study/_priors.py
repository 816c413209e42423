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
in-process-sampling    always                              no loader workers (sampling in
                                                           the training process)
bf16                   CPU with amx_bf16 or avx512_bf16,   bfloat16 autocast
                       where a linear layer runs faster
                       under it (``bf16_gain``)
sparse-aggregation     device cpu, a model that takes it   aggregation sparse (it loses on
                                                           CUDA)
bits-dropout           device cpu, a built-in model        dropout_masks bits (torch's
                                                           bernoulli_ is a large share of
                                                           a CPU step)
workers-on-free-cores  at least 2 cores                    one loader worker per core but
                                                           one (left to the training step)
fast-end               after the rows above, whenever the  the fastest measured config
                       fastest config's fast end is not    with the least work the space
                       measured yet                        offers (the fanout that samples
                                                           fewest nodes a seed, no
                                                           checkpointing) and the compute
                                                           changes of the rows above that
                                                           apply (autocast dtype,
                                                           aggregation, dropout masks)
=====================  ==================================  ===============================

No loader workers go first on a CPU: on a few cores the workers take the cores the
step computes on, and that row usually measures fast and lean, so that the rows after
it, with the baseline's workers, can be raced against it (a window stops once its
best case could not join the front: ``autotune.trial._window``) rather than each
measured to full precision beside nothing to lose to.

The rows above each change one thing of the baseline, so the search learns what each
pays; but the fastest config usually needs several of them at once, and a search of a
few trials (the quick start's 8) may not reach that corner by sampling: the fast-end
row goes there directly. A smaller fanout samples fewer nodes for every seed, so it is
never slower and never larger (the accuracy guard, where asked, judges what it costs),
and checkpointing only ever trades time for memory: neither needs a measurement to
say which end is fast. The compute changes are the table's, measured like any trial.

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
from autotune.env import BF16_FLAGS, available_cores, bf16_matmul_gain, cpu_flags
from autotune.errors import ConfigError
from autotune.study._space import FITTED_KNOBS, SearchSpace, in_space

@dataclass(frozen=True)
class Machine:
    device: str
    cores: int
    cpu_flags: frozenset[str]
    # a linear layer under bfloat16 autocast over float32 here (measured by
    # autotune.env.bf16_matmul_gain where the flags compute bfloat16): avx512_bf16
    # without AMX may compute it slower, and then neither the bf16 row nor the fast
    # end takes it (the sampler still may, where the space holds it)
    bf16_gain: float = 1.0


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
    Prior("in-process-sampling", lambda m: True, lambda m: {"num_workers": 0}),
    Prior("bf16", lambda m: m.device == "cpu" and any(f in m.cpu_flags for f in BF16_FLAGS)
          and m.bf16_gain >= 1, lambda m: {"amp_dtype": "bfloat16"}),
    Prior("sparse-aggregation", lambda m: m.device == "cpu",
          lambda m: {"aggregation": "sparse"}),
    Prior("bits-dropout", lambda m: m.device == "cpu", lambda m: {"dropout_masks": "bits"}),
    Prior("workers-on-free-cores", lambda m: m.cores >= 2,
          lambda m: {"num_workers": m.cores - 1}),
)


FAST_END = "fast-end"

# The knobs of the rows' changes that the fast-end row takes: how the step computes.
# Where sampling runs (loader workers, GPU sampling) the fastest config has measured.
COMPUTE_KNOBS = ("amp_dtype", "aggregation", "dropout_masks")


def machine_facts(device: str) -> Machine:
    """This machine's facts for ``device``; on a CPU that computes bfloat16, with its
    linear layer's gain under it timed (about 0.1 s, once a process)."""
    flags = cpu_flags()
    native = device == "cpu" and any(f in flags for f in BF16_FLAGS)
    return Machine(device, len(available_cores()), flags,
                   bf16_matmul_gain() if native else 1.0)


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


def fast_end(fastest: TrialConfig, space: SearchSpace, machine: Machine) -> TrialConfig:
    """The fast-end row of :data:`PRIORS`' table: ``fastest`` with the space's fanout
    that samples the fewest nodes a seed, no checkpointing, and the compute changes of
    the rows that apply here; each change taken only where the space holds it and the
    config accepts it."""
    changes: list[tuple[str, object]] = [("checkpointing", False)]
    fanouts = space.knobs.get("num_neighbors")
    if fanouts is not None and fanouts.choices:
        changes.append(("num_neighbors", min(fanouts.choices, key=sampled_per_seed)))
    for prior in PRIORS:
        if prior.applies(machine):
            changes += [(k, v) for k, v in prior.change(machine).items() if k in COMPUTE_KNOBS]
    # its loader workers and compile mode as they are; unpinned, as every row (a
    # queued config's params name no affinity: autotune.study._space.params_for)
    config = fastest.replace(loader_cores=None, compute_cores=None)
    for name, value in changes:
        try:
            changed = config.replace(**{name: value})
        except ConfigError:  # the study's model refuses it (gcn: sparse aggregation)
            continue
        if in_space(changed, space):
            config = changed
    return config


def sampled_per_seed(fanout: tuple[int, ...]) -> float:
    """The most nodes a fanout samples for one seed, over its hops (-1: every
    neighbour, counted as unbounded)."""
    total, width = 0.0, 1.0
    for k in fanout:
        width *= float("inf") if k < 0 else k
        total += width
    return total
