#!/usr/bin/python3
"""Open MPI collectives (via mpi4py) measured like hcomm-bench; see policy.py.

Run under mpirun, e.g. TCP transport on loopback:
  mpirun --allow-run-as-root --oversubscribe -np 4 --mca pml ob1 --mca btl tcp,self \
      /usr/bin/python3 mpi_bench.py --transport tcp --json out.jsonl
or shared memory: `--mca btl vader,self`. Debian's python3 (/usr/bin/python3) carries
mpi4py and numpy; a pyenv python does not.
"""

import argparse
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import policy  # noqa: E402


def run_op(comm, op, size):
    n, r = comm.Get_size(), comm.Get_rank()
    count = size // 4
    if op == "all_reduce":
        send = np.full(count, r + 1, dtype=np.float32)
        recv = np.empty(count, dtype=np.float32)
        expect = np.full(count, n * (n + 1) / 2, dtype=np.float32)
        return lambda: comm.Allreduce(send, recv, op=MPI.SUM), recv, expect
    if op == "all_gather":
        per = count // n
        send = np.full(per, r + 1, dtype=np.float32)
        recv = np.empty(per * n, dtype=np.float32)
        expect = np.repeat(np.arange(1, n + 1, dtype=np.float32), per)
        return lambda: comm.Allgather(send, recv), recv, expect
    if op == "reduce_scatter":
        per = count // n
        send = np.full(per * n, r + 1, dtype=np.float32)
        recv = np.empty(per, dtype=np.float32)
        expect = np.full(per, n * (n + 1) / 2, dtype=np.float32)
        return lambda: comm.Reduce_scatter_block(send, recv, op=MPI.SUM), recv, expect
    if op == "broadcast":
        buf = np.full(count, r + 1, dtype=np.float32)
        expect = np.full(count, 1, dtype=np.float32)
        return lambda: comm.Bcast(buf, root=0), buf, expect
    if op == "all_to_all":
        per = count // n
        send = np.repeat(np.arange(n, dtype=np.float32) + 100 * r, per)
        recv = np.empty(per * n, dtype=np.float32)
        expect = np.repeat(100 * np.arange(n, dtype=np.float32) + r, per)
        return lambda: comm.Alltoall(send, recv), recv, expect
    raise ValueError(op)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--budget", type=int, default=256 << 20, help="bytes per size to time")
    p.add_argument("--max-iters", type=int, default=policy.MAX_ITERS, help="most timed iterations per size")
    p.add_argument("--ops", default=",".join(policy.OPS))
    p.add_argument("--transport", default="tcp")
    p.add_argument("--json")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    n, r = comm.Get_size(), comm.Get_rank()
    if r == 0:
        print(f"# Open MPI {MPI.Get_library_version().split(',')[0]}, {n} ranks, btl {a.transport}")
        policy.header()
    for op in a.ops.split(","):
        for size in policy.sizes(a.min_bytes, a.max_bytes, a.factor):
            if size // 4 < n:
                continue
            fn, out, expect = run_op(comm, op, size)
            # nccl-tests rounds per-rank blocks down; report the bytes actually moved.
            eff = size if op in ("all_reduce", "broadcast") else (size // 4 // n) * n * 4
            for _ in range(policy.warmup(size)):
                fn()
            k = policy.iters(size, a.budget, a.max_iters)
            comm.Barrier()
            t0 = MPI.Wtime()
            for _ in range(k):
                fn()
            dt = (MPI.Wtime() - t0) / k
            dt = comm.allreduce(dt, op=MPI.MAX)
            if op == "broadcast":
                out[:] = r + 1
                fn()
            wrong = int(np.count_nonzero(out[: expect.size] != expect))
            wrong = comm.allreduce(wrong, op=MPI.SUM)
            if r == 0:
                policy.row("openmpi", a.transport, n, op, eff, dt, wrong, a.json)


if __name__ == "__main__":
    main()
