#!/usr/bin/python3
"""PyTorch Gloo collectives measured like hcomm-bench; see policy.py.

One process per rank (the driver starts them, in network namespaces when links are shaped):
  /usr/bin/python3 gloo_bench.py --rank R --world N --master 10.77.0.1:29500 --ifname eth0
Debian's python3-torch is CPU-only and carries Gloo (the registry's torch wheels need CUDA
libraries to import). Gloo in torch 1.13 has no reduce_scatter: that row is skipped.
"""

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import policy  # noqa: E402


def run_op(op, size, n, r):
    count = size // 4
    if op == "all_reduce":
        buf = torch.full((count,), float(r + 1))
        expect = torch.full((count,), n * (n + 1) / 2)

        return (lambda: dist.all_reduce(buf)), buf, expect, size
    if op == "all_gather":
        per = count // n
        send = torch.full((per,), float(r + 1))
        outs = [torch.empty(per) for _ in range(n)]
        expect = torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(per)
        return (lambda: dist.all_gather(outs, send)), outs, expect, per * n * 4
    if op == "broadcast":
        buf = torch.full((count,), float(r + 1))

        return (lambda: dist.broadcast(buf, src=0)), buf, torch.full((count,), 1.0), size
    if op == "all_to_all":
        per = count // n
        send = (torch.arange(n, dtype=torch.float32) + 100 * r).repeat_interleave(per)
        recv = torch.empty(per * n)
        expect = (100 * torch.arange(n, dtype=torch.float32) + r).repeat_interleave(per)
        return (lambda: dist.all_to_all_single(recv, send)), recv, expect, per * n * 4
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", default="127.0.0.1:29500")
    p.add_argument("--ifname", default="lo")
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--budget", type=int, default=256 << 20)
    p.add_argument("--max-iters", type=int, default=policy.MAX_ITERS, help="most timed iterations per size")
    p.add_argument("--ops", default=",".join(policy.OPS))
    p.add_argument("--transport", default="tcp")
    p.add_argument("--json")
    a = p.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", a.ifname)
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://{a.master}", rank=a.rank, world_size=a.world,
        timeout=datetime.timedelta(seconds=120),
    )
    n, r = a.world, a.rank
    if r == 0:
        print(f"# PyTorch {torch.__version__} Gloo, {n} ranks, {a.ifname}")
        policy.header()
    for op in a.ops.split(","):
        for size in policy.sizes(a.min_bytes, a.max_bytes, a.factor):
            if size // 4 < n:
                continue
            made = run_op(op, size, n, r)
            if made is None:
                if r == 0:
                    print(f"  {op:<15}{size:>12}  (not supported by Gloo in torch {torch.__version__})")
                break
            fn, out, expect, eff = made
            for _ in range(policy.warmup(size)):
                fn()
            k = policy.iters(size, a.budget, a.max_iters)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            dt = torch.tensor([(time.perf_counter() - t0) / k], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if op in ("all_reduce", "broadcast"):
                out.fill_(r + 1)  # in place: refill so the check sees exactly one operation
            if op in ("all_reduce", "broadcast"):
                fn()
            got = torch.cat(out) if isinstance(out, list) else out
            wrong = torch.tensor([int((got[: expect.numel()] != expect).sum())], dtype=torch.int64)
            dist.all_reduce(wrong)
            if r == 0:
                policy.row("gloo", a.transport, n, op, eff, float(dt[0]), int(wrong[0]), a.json)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
