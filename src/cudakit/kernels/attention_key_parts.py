"""How many parts of the keys a Triton attention forward might take (attn_fwd's KSPLIT): a model of
the launch, which kernels/attention.py offers to kernels/paths.py as a second candidate beside one
part; the timing there decides.

A forward's programs each take one row block of one batch*head (and one part of its keys). Where
they are fewer than the SMs, or their last wave is mostly empty, or (causal) the longest rows keep a
few SMs busy while the rest sit idle, splitting the keys gives more, shorter programs; the parts'
float32 outputs are then merged by attn_fwd_combine, which costs memory traffic and a launch.

The model: each program costs its key blocks plus PROGRAM_COST (its Q tile, its stores, the
pipeline's start), handed in launch order to whichever SM frees first (the order the GPU hands
blocks out, at one program an SM: the split float32 forward's tiles take a whole SM's registers).
On an H100 (132 SMs, 2026-11-27, the 13:41 UTC call, benchmarks/sweeps/attention_f32_variants.py
--integrated --causal --key-splits; float32, head dim 128; BxHxS, tiles, then times in 2, 3, 4
parts over one part's, modelled / measured):
- 2x8x1536 plain, 128 x 64: 0.81 0.96 0.92 / 0.83 0.92 0.92 (2 parts offered);
- 2x8x1536 causal, 128 x 64: 1.00 1.12 1.19 / 0.98 1.03 1.12 (declined);
- 1x8x1024 causal, 64 x 64: 0.72 0.83 0.94 / 0.81 0.90 0.94 (2 parts offered);
- 1x8x1024 plain, 64 x 64: 1.11 1.22 1.33 / 1.26 1.32 1.32 (declined);
- 4x32x512 plain and causal, 128 x 64: 1.20 and more / 1.24 and more (declined);
- 1x8x1024 on 128 x 64 tiles (64 programs, fewer than half the SMs): plain 0.56 0.78 0.67 / 0.97
  0.92 0.93, causal 0.56 0.44 0.50 / 0.64 0.62 0.58.
That sweep timed warm calls back to back, so calls shorter than their host cost timed the host. Each
call behind an L2 flush instead (device time alone; the 15:00 UTC call, with --cold), 1x8x1024 on
128 x 64 tiles ran as modelled: plain 0.64 0.85 0.69, causal 0.62 0.50 0.50; the model's count
there (2, and 3 causal) is kernels/attention.py's candidate beside the small-grid tiles.
"""
from __future__ import annotations

import functools
import heapq
import math

PROGRAM_COST = 2        # a program's fixed cost, in key blocks (fitted to the sweep above)
MAX_PARTS = 4
MIN_GAIN = 0.9          # offered only where the model puts parts at most this fraction of one part
_MAX_WAVES = 4          # launches of this many waves of row blocks or more: one part, not modelled


def _key_blocks(lq: int, lk: int, dlo: int, dhi: int, block_m: int, block_n: int) -> list[int]:
    """Key blocks each row block of one batch*head visits: rows i see keys [i + dlo, i + dhi)."""
    out = []
    for m in range(math.ceil(lq / block_m)):
        first, last = m * block_m, min(lq, (m + 1) * block_m) - 1
        lo, hi = max(0, first + dlo), min(lk, last + dhi)
        out.append(max(0, math.ceil(hi / block_n) - lo // block_n) if hi > lo else 0)
    return out


def _programs(blocks: list[int], bh: int, parts: int) -> list[int]:
    """Key blocks of each program in grid order (batch*heads outer, row blocks, then parts: each
    row block's blocks in `parts` even shares, as attn_fwd splits them)."""
    per_head = []
    for n in blocks:
        share = math.ceil(n / parts)
        per_head += [max(0, min(share, n - p * share)) for p in range(parts)]
    return per_head * bh


def _makespan(programs: list[int], sms: int) -> float:
    """The launch's length, in key blocks: each program to the SM that frees first."""
    free = [0.0] * min(sms, len(programs))
    for n in programs:
        heapq.heapreplace(free, free[0] + n + PROGRAM_COST)
    return max(free, default=0.0)


@functools.lru_cache(maxsize=1024)
def key_parts(bh: int, lq: int, lk: int, dlo: int, dhi: int, block_m: int, block_n: int, sms: int,
              longest_first: bool) -> int:
    """The part count (2..MAX_PARTS) the model puts fastest, where it puts it at most MIN_GAIN of
    one part's time; else 1. longest_first: the launch's programs ordered longest first
    (attn_fwd's LPT, causal forwards); else in grid order."""
    blocks = _key_blocks(lq, lk, dlo, dhi, block_m, block_n)
    if bh <= 0 or not blocks or bh * len(blocks) >= _MAX_WAVES * sms:
        return 1
    times = {}
    for parts in range(1, MAX_PARTS + 1):
        progs = _programs(blocks, bh, parts)
        times[parts] = _makespan(sorted(progs, reverse=True) if longest_first else progs, sms)
    best = min(times, key=lambda p: (times[p], p))   # (ties: the fewer parts, less traffic)
    return best if times[best] <= MIN_GAIN * times[1] else 1


# Programs an SM the split float32 forward's 64 x 64 tiles (4 warps) fit at once: their registers
# (255 a thread) and shared memory (106.5 KiB at head dim 80) allow two, and a program alone on
# its SM issues from one warp a scheduler, latency-bound (H200, ncu, 2026-11-28 09:39 UTC,
# history/attention/nvidia-h200-attention-f32-small-grid-ncu.json).
PROGRAMS_PER_SM = 2


@functools.lru_cache(maxsize=1024)
def filling_parts(bh: int, lq: int, lk: int, dlo: int, dhi: int, block_m: int, block_n: int, sms: int) -> int:
    """The part count (2..MAX_PARTS) that brings a launch of `bh` batch*heads on block_m-row tiles
    nearest to PROGRAMS_PER_SM programs on each of `sms` SMs, no more parts than the longest row
    block has key blocks; 1 where one part already fills them so. A candidate beside key_parts'
    (whose model counts one program an SM at a time): on an H200 (2026-11-28 09:51 UTC,
    benchmarks/sweeps/attention_f32_variants.py --integrated --causal --cold --key-splits --tiles
    64x64x4x1, V transposed), B1 H16 S256 D80 on 64 x 64 tiles in 4 parts ran 0.023 ms against
    0.025 in 2 (torch 0.029), causal 0.023 against 0.024 (torch 0.029); through the public call the
    timing took it, 1.375x torch and causal 1.429x where the shipped candidates had given 1.226x and
    1.164x (09:54 and 09:34 UTC, attention_f32_shapes.py --fwd-only,
    history/attention/nvidia-h200-attention-f32-small-grid-filling-parts.json)."""
    blocks = _key_blocks(lq, lk, dlo, dhi, block_m, block_n)
    rows = bh * len(blocks)
    if rows <= 0 or rows >= PROGRAMS_PER_SM * sms:
        return 1
    return max(1, min(MAX_PARTS, math.ceil(PROGRAMS_PER_SM * sms / rows), max(blocks)))
