"""Shared measurement policy of the comparison benchmarks (Open MPI, Gloo).

Mirrors `hcomm-bench` (agent/comm/src/bin/hcomm-bench/plan.rs) so that every implementation
is measured the same way:
- sizes: powers of `factor` from `min_bytes` to `max_bytes` (nccl-tests `-b -e -f`);
- "size" is nccl-tests' notion: the all-reduce / broadcast buffer, the all-gather *output*,
  the reduce-scatter *input*, the all-to-all send buffer, all f32;
- warm-up: 3 iterations below 16 MiB, 1 above; timed iterations: clamp(budget / size, 2, max_iters) (50 unless --max-iters);
- time: mean per iteration on each rank, then the MAX over ranks (the slowest rank finishes
  the collective);
- algbw = size / time; busbw = algbw * factor (nccl-tests' PERFORMANCE.md):
  all_reduce 2(n-1)/n, all_gather and reduce_scatter and all_to_all (n-1)/n, broadcast 1.
"""

import json
import sys

OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]


def sizes(min_bytes, max_bytes, factor):
    s = min_bytes
    while s <= max_bytes:
        yield s
        s *= factor


def warmup(size):
    return 3 if size < (16 << 20) else 1


MAX_ITERS = 50


def iters(size, budget, max_iters=MAX_ITERS):
    return max(2, min(max(max_iters, 2), budget // max(size, 1)))


def bus_factor(op, n):
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def header(out=sys.stdout):
    print(
        f"# {'op':<15}{'size':>12}{'count':>12}{'type':>6}{'redop':>6}"
        f"{'time_us':>12}{'algbw':>9}{'busbw':>9}{'#wrong':>8}",
        file=out,
    )
    print(f"# {'':<15}{'(B)':>12}{'(elems)':>12}{'':>6}{'':>6}{'':>12}{'(GB/s)':>9}{'(GB/s)':>9}", file=out)


def row(impl, transport, world, op, size, seconds, wrong, json_path=None):
    count = size // 4
    algbw = size / seconds / 1e9
    busbw = algbw * bus_factor(op, world)
    redop = "sum" if op in ("all_reduce", "reduce_scatter") else "none"
    print(
        f"  {op:<15}{size:>12}{count:>12}{'f32':>6}{redop:>6}"
        f"{seconds * 1e6:>12.1f}{algbw:>9.3f}{busbw:>9.3f}{wrong:>8}",
        flush=True,
    )
    if json_path:
        rec = dict(
            impl=impl, transport=transport, world=world, op=op, bytes=size, count=count,
            dtype="f32", time_us=seconds * 1e6, algbw=algbw, busbw=busbw, wrong=wrong,
        )
        with open(json_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
