"""Triton kernels for neighbour sampling on the GPU.

Why a kernel of our own: PyG has no GPU neighbour sampler (pyg-lib samples on the
CPU), and the torch path in :mod:`autotune.sampling._neighbor` runs a handful of small kernels
per fanout position, so a [25, 10] batch costs ~70 launches and several host syncs
before any work is done. Here one launch per hop draws every frontier node's exact
uniform k-subset (Floyd's algorithm, one frontier node per lane, the picks so far
held in registers), and gathers each pick's source node in the same pass.

Output is in *slots*: ``k`` per frontier node, ``-1`` where a node has fewer than
``k`` neighbours (or is itself a ``-1`` slot), so every shape is known before the
launch and nothing is read back to the host.

:func:`gather_rows` is the feature gather of ``feature_placement: pinned``: the graph
and the sampling are on the GPU, the features stay in pinned host memory, and the
kernel reads each sampled node's row from there through unified virtual addressing
(zero copy: only the rows a batch needs cross the bus), as Quiver and DGL's
GraphBolt do for graphs whose features do not fit on the GPU.

Triton is optional. Without it (or for ``k = -1``) the sampler uses its torch path.
On CPU tensors the kernel runs in Triton's interpreter, which needs
``TRITON_INTERPRET=1`` in the environment before the first call; that is how CI
tests this kernel on machines without a GPU.
"""
from __future__ import annotations

import os
from functools import lru_cache

import torch
from torch import Tensor

BLOCK = 128  # frontier nodes per program
# In Triton's interpreter a program costs per op, not per lane (each op is a numpy
# call over the whole block), so on CPU tensors one program takes this many nodes:
# the same kernel in 8x fewer interpreted ops (tests/test_sampler.py's chi-square runs).
INTERPRET_BLOCK = 1024
MAX_K = 256  # picks held in registers per lane; larger fanouts use the torch path


def triton_available() -> bool:
    # find_spec, not import: importing triton fixes its interpreter mode for good.
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def usable(device: torch.device, k: int) -> bool:
    """Whether the hop kernel can draw ``k`` per node for tensors on ``device``."""
    if not 0 < k <= MAX_K or not triton_available():
        return False
    return device.type == "cuda" or (device.type == "cpu" and interpreting())


@lru_cache(maxsize=2)
def _hop_kernel(interpret: bool):
    # Built on first use, not at import: triton.jit reads TRITON_INTERPRET when it
    # decorates, and importing triton costs ~1 s that CPU-only runs should not pay.
    import triton
    import triton.language as tl

    def hop(colptr, row, frontier, seed_ptr, out_edge, out_src, m,
            K: tl.constexpr, KPAD: tl.constexpr, REPLACE: tl.constexpr,
            BLOCK_M: tl.constexpr):
        lanes = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        live = lanes < m
        node = tl.load(frontier + lanes, mask=live, other=-1)
        has = live & (node >= 0)
        safe = tl.where(has, node, 0)
        start = tl.load(colptr + safe, mask=has, other=0)
        deg = tl.where(has, tl.load(colptr + safe + 1, mask=has, other=0) - start, 0)
        seed = tl.load(seed_ptr)
        cols = tl.arange(0, KPAD)[None, :]
        picks = tl.full([BLOCK_M, KPAD], -1, tl.int64)
        for p in range(K):
            # 53 random bits from two Philox words, as torch.rand(float64) draws them.
            r0, r1, _, _ = tl.randint4x(seed, lanes * K + p)
            bits = (r0 >> 5).to(tl.int64) * 67108864 + (r1 >> 6).to(tl.int64)
            u = bits.to(tl.float64) * 1.1102230246251565e-16  # 2 ** -53
            if REPLACE:
                t = tl.minimum((u * deg.to(tl.float64)).to(tl.int64), deg - 1)
                valid = has & (deg > 0)
            else:
                # Floyd: j = deg - K + p; t uniform on [0, j]; keep j if t was taken.
                j = deg - K + p
                t = tl.minimum((u * (j + 1).to(tl.float64)).to(tl.int64), j)
                seen = tl.sum(((picks == t[:, None]) & (cols < p)).to(tl.int32), axis=1)
                t = tl.where(seen > 0, j, t)
                t = tl.where(deg > K, t, p)  # deg <= K: every neighbour, in order
                picks = tl.where(cols == p, t[:, None], picks)
                valid = has & (p < deg)
            pos = start + t
            src = tl.load(row + pos, mask=valid, other=-1)
            slot = lanes.to(tl.int64) * K + p
            tl.store(out_edge + slot, tl.where(valid, pos, -1), mask=live)
            tl.store(out_src + slot, tl.where(valid, src, -1), mask=live)

    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(hop)
    # Not specialised on the frontier size: a batch of another size (an epoch's last)
    # would compile the kernel again, ~1 s inside a measured window.
    return triton.jit(hop, do_not_specialize=["m"])


def draw_hop_slots(colptr: Tensor, row: Tensor, frontier: Tensor, k: int, replace: bool,
                   seed: Tensor) -> tuple[Tensor, Tensor]:
    """One hop for every frontier slot: ``(edge, src)``, each ``[len(frontier) * k]``,
    the CSC position and source node of each pick, ``-1`` in empty slots. ``seed`` is
    a one-element int64 tensor on the frontier's device (read by the kernel, so a new
    seed per hop costs no host sync)."""
    m = frontier.numel()
    edge = torch.empty(m * k, dtype=torch.long, device=frontier.device)
    src = torch.empty_like(edge)
    if m == 0:
        return edge, src
    interpret = frontier.device.type == "cpu"
    block = INTERPRET_BLOCK if interpret else BLOCK
    grid = ((m + block - 1) // block,)
    _hop_kernel(interpret)[grid](colptr, row, frontier, seed, edge, src, m, K=k,
                                 KPAD=max(2, 1 << (k - 1).bit_length()),
                                 REPLACE=bool(replace), BLOCK_M=block)
    return edge, src


GATHER_ROWS = 32  # rows per program
GATHER_COLS = 128  # columns per program


@lru_cache(maxsize=2)
def _gather_kernel(interpret: bool):
    import triton
    import triton.language as tl

    def gather(x, index, out, n, cols, x_stride, out_stride,
               BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        feats = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
        live = rows < n
        node = tl.load(index + rows, mask=live, other=-1)
        keep = (live & (node >= 0))[:, None] & (feats < cols)[None, :]
        safe = tl.where(node >= 0, node, 0).to(tl.int64)
        value = tl.load(x + safe[:, None] * x_stride + feats[None, :], mask=keep, other=0)
        tl.store(out + rows.to(tl.int64)[:, None] * out_stride + feats[None, :], value,
                 mask=live[:, None] & (feats < cols)[None, :])

    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(gather)
    return triton.jit(gather, do_not_specialize=["n"])


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` (rows), computed on ``index``'s device by reading ``x`` where it
    lies: ``x`` a 2-D tensor with contiguous rows, in pinned host memory for a CUDA
    ``index`` (read through unified addressing), or on ``index``'s device. A negative
    index gives a row of zeros. On CPU it runs in Triton's interpreter
    (``TRITON_INTERPRET=1``), which is how CI checks it."""
    device = index.device
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"gather_rows needs a 2-D tensor with contiguous rows "
                         f"(got shape {tuple(x.shape)}, strides {x.stride()})")
    if device.type == "cuda" and x.device.type == "cpu" and not x.is_pinned():
        raise ValueError("gather_rows reads host features from the GPU only from pinned "
                         "memory (x.pin_memory())")
    if device.type == "cpu" and not interpreting():
        raise RuntimeError("gather_rows on CPU tensors runs in Triton's interpreter: set "
                           "TRITON_INTERPRET=1 before the first kernel call")
    n, cols = index.numel(), x.size(1)
    out = torch.empty(n, cols, dtype=x.dtype, device=device)
    if n == 0 or cols == 0:
        return out
    grid = ((n + GATHER_ROWS - 1) // GATHER_ROWS, (cols + GATHER_COLS - 1) // GATHER_COLS)
    _gather_kernel(device.type == "cpu")[grid](
        x, index, out, n, cols, x.stride(0), out.stride(0), BLOCK_N=GATHER_ROWS,
        BLOCK_F=GATHER_COLS)
    return out
