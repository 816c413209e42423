"""The numerics check of a precision candidate: its gradients on probe batches
(:func:`numerics_check`) before it trains, its training loss over its pairs
(:func:`loss_check`) before it is kept; and what a run says of precision
(:func:`precision_notes`)."""
from __future__ import annotations

import statistics

import torch

from autotune.config import TrialConfig
from autotune.env import bf16_matmul_gain, native_bf16
from autotune.pipeline import Pipeline
from autotune.tuning._candidates import PRECISION_KNOBS
from autotune.tuning._spec import TuneSpec

# The numerics check a precision candidate passes before its pairs: on each of the
# first PROBES batches the incumbent trained, its gradient against its own in float32
# (same parameters, same dropout masks) points the same way (cosine at least
# GRAD_COSINE) and is as large (norms within GRAD_NORM of each other)
PROBES = 3
GRAD_COSINE = 0.99
GRAD_NORM = 0.05
# ... both passes drawing bit masks (TrialConfig.dropout_masks), whatever either
# pipeline trains with: the same masks on both sides is all the comparison needs, and
# on a CPU bit masks cost a quarter of an int64 draw an element where torch's draw
# each on its own (docs/knobs.md)
PROBE_MASKS = "bits"
# ... and then, over its pairs, its training loss stays within the incumbent's paired
# noise (loss_check), which is never taken as under this share of its mean loss
LOSS_FLOOR = 0.05


# what precision may give, and where that was measured (the figures stay there)
PRECISION_GAIN = ("bfloat16 autocast: the largest single-knob gain benchmarks/knobs.py "
                  "measured where bfloat16 is computed natively (docs/benchmarks.md), each "
                  "candidate checked by its gradients first")


UNASKED = ("precision: not tried (it changes the numerics: --tune-precision, or "
           "TuneSpec(precision=True), asks for it)")


def precision_notes(config: TrialConfig, spec: TuneSpec) -> list[str]:
    """What the run says of precision before it trains: bfloat16 left out where this
    CPU emulates it, or computes it slower than float32 (:func:`bf16_matmul_gain`,
    measured now) (with consent), or the flag that would try it and what it would
    likely give here (without)."""
    native = config.device == "cuda" or native_bf16()
    if spec.precision and not native:
        return ["precision: bfloat16 autocast not tried: this CPU has neither avx512_bf16 "
                "nor AMX, and computes bfloat16 by emulation, slower than float32 "
                "(docs/knobs.md); the feature dtype and dropout masks are tried"]
    if config.amp_dtype != "float32" or not native:
        return []
    if config.device == "cuda":  # a GPU computes it: no probe
        return [] if spec.precision else [f"{UNASKED}; {PRECISION_GAIN}"]
    gain = bf16_matmul_gain()
    slower = (f"a linear layer under bfloat16 autocast ran at {gain:.2f}x float32 on this "
              "CPU, measured before the run, and autocast lowers only such layers")
    if spec.precision:
        return [f"precision: bfloat16 autocast not tried: {slower}; the feature dtype and "
                "dropout masks are tried"] if gain < 1 else []
    if gain < 1:
        return [f"{UNASKED}; bfloat16 autocast would not pay here ({slower}), bfloat16 "
                "features and bit dropout masks may"]
    return [f"{UNASKED}; {PRECISION_GAIN}; a linear layer under it ran at {gain:.2f}x "
            "float32 on this CPU, measured before the run"]


# the numerics every check compares against: float32, and torch's own dropout masks
REFERENCE = {"amp_dtype": "float32", "feature_dtype": "float32", "dropout_masks": "bernoulli"}


def departs(incumbent: TrialConfig, candidate: TrialConfig,
            knobs: tuple[str, ...] = PRECISION_KNOBS) -> bool:
    """Whether ``candidate`` moves a knob of precision (of ``knobs``: :data:`DTYPE_KNOBS`,
    the arithmetic's, which the numerics check checks) away from the incumbent's to
    another than :data:`REFERENCE`'s: a candidate that goes back to float32 (or to
    torch's masks) needs no check (float32 is what a check compares against)."""
    return any(getattr(candidate, k) not in (getattr(incumbent, k), REFERENCE[k])
               for k in knobs)


def restores(incumbent: TrialConfig, candidate: TrialConfig) -> bool:
    """Whether ``candidate`` moves a knob of precision back to :data:`REFERENCE`'s
    (float32, torch's masks) and none away from it: it gives back the numerics a
    lower precision changed, so the run keeps it where it is no slower
    (:meth:`autotune.tuning.TunedRun._verdict`), not only where it is faster."""
    back = any(getattr(candidate, k) != getattr(incumbent, k) and
               getattr(candidate, k) == REFERENCE[k] for k in PRECISION_KNOBS)
    return back and not departs(incumbent, candidate)


def numerics_check(incumbent: Pipeline, candidate: Pipeline, probes: list) -> str:
    """Why ``candidate``'s numerics differ from float32's too much to train on ("" where
    they do not): on each probe batch, its gradient and the gradient of the same
    parameters in float32 (:meth:`Pipeline.gradients` of
    :meth:`~Pipeline.in_float32`: the candidate's own knobs but the dtypes, so that
    the comparison holds its dtypes alone, and costs a float32 pass of its own step
    rather than of the incumbent's, which may be slower: scatter aggregation, say),
    both drawing the same dropout masks (:data:`PROBE_MASKS`, from the same seed: a
    change of the masks' draws is a change of the random numbers, not of the
    arithmetic, and is not what this compares), must point the same way (cosine at
    least :data:`GRAD_COSINE`) and be as large (norms within :data:`GRAD_NORM`). A
    probe that cannot run (a model the task's loss cannot call) fails it: precision
    is kept only where it was checked. ``incumbent`` is the pipeline whose batches
    the probes are; the comparison needs only the candidate's two pipelines."""
    if not probes:
        return "no probe batch trained yet"
    reference = candidate.in_float32()
    for k, batch in enumerate(probes, start=1):
        try:
            ours, theirs = reference.gradients(batch, seed=k, masks=PROBE_MASKS), \
                candidate.gradients(batch, seed=k, masks=PROBE_MASKS)
        except Exception as exc:  # the user's model or loss: the check could not run
            return f"its probe could not run ({type(exc).__name__}: {exc})"[:200]
        if not bool(torch.isfinite(theirs).all()):
            return f"non-finite gradients on probe batch {k}"
        norms = ours.norm(), theirs.norm()
        if float(norms[0]) == 0.0:
            continue
        cosine = float(torch.dot(ours, theirs) / (norms[0] * norms[1]).clamp_min(1e-30))
        ratio = float(norms[1] / norms[0])
        if cosine < GRAD_COSINE:
            return (f"gradient direction off on probe batch {k}: cosine {cosine:.4f} < "
                    f"{GRAD_COSINE}")
        if abs(ratio - 1) > GRAD_NORM:
            return (f"gradient size off on probe batch {k}: {ratio:.3f}x the float32 one, "
                    f"beyond ±{100 * GRAD_NORM:.0f}%")
    return ""


def loss_check(losses: list[tuple[float, float]]) -> str:
    """Why a precision candidate's training loss over its windows lies beyond the
    incumbent's paired noise ("" where it does not, or with under 2 pairs to tell):
    its median excess over the incumbent's window in the same pair must not exceed the
    median change between the incumbent's own windows of consecutive pairs (what its
    loss moves by anyway, a trend of two windows included), or :data:`LOSS_FLOOR` of
    the incumbent's median loss where that is larger (a converged loss barely moves).
    Medians, not means: in a run's first epoch the loss falls by most of itself from
    one window to the next, and a pair or two there, whichever of its windows trained
    first, would outweigh every later pair (the incumbent first in one pair and second
    in the next cancels a straight trend, not one that flattens). A lower loss is no
    harm."""
    if len(losses) < 2:
        return ""
    excess = statistics.median(ours - theirs for ours, theirs in losses)
    noise = max(statistics.median(abs(b[1] - a[1]) for a, b in zip(losses, losses[1:])),
                LOSS_FLOOR * statistics.median(theirs for _, theirs in losses))
    if excess <= noise:
        return ""
    return (f"its training loss {excess:+.4g} over the float32 windows beside it, the "
            f"median pair's, beyond their own noise of {noise:.4g}")
