"""Run by the e2e testbed (``e2e/tests/hccl_pools.rs``) as the container of a member Pod,
against the real agent of its simulated host: ``python3 -m pytest`` of this file is the
engine. Not part of ``python/tests`` (it needs a member Pod around it).

The member follows its epochs as an engine does (prepare beside the serving communicator,
switch, an all-reduce that must sum to the epoch's size), says ``serving`` once the first
one serves, reports load, and on the agent's ``drain_requested`` drains, reporting its
progress down to zero. Each step is appended to ``$HCOMM_PYTEST_OUT/<pod>.jsonl`` for the
harness, which checks what the agent did with it (the Pod's gate, the epochs' sizes, the
drain waiting for the last report).
"""

import json
import os
import signal
import time

from hcomm_worker import EpochError, RefusedError, TimeoutError_, Worker

POD = os.environ["POD_NAME"]
OUT = os.environ["HCOMM_PYTEST_OUT"]
# How long the member may wait for its first assignment (verification, then the join).
ASSIGNMENT_WAIT = 120.0
# The drain's progress reports, one this far apart: the agent must wait for the last.
REPORT_GAP = 1.0


# The Pod is deleted once its drain is over: the kubelet's SIGTERM must not cut pytest
# off before it has reported (the engine already drained; nothing else to do on it).
signal.signal(signal.SIGTERM, lambda *_: None)


def note(event, **fields):
    fields.update(event=event, t=time.time())
    with open(os.path.join(OUT, POD + ".jsonl"), "a") as f:
        f.write(json.dumps(fields) + "\n")


def first_assignment(w):
    deadline = time.monotonic() + ASSIGNMENT_WAIT
    while True:
        try:
            return w.assignment()
        except RefusedError:
            assert time.monotonic() < deadline, "no assignment: the member was never verified"
            time.sleep(0.1)


def test_a_member_follows_its_epochs_reports_its_load_and_drains():
    w = Worker.open()
    a = first_assignment(w)
    note("assigned", group=a["group"], backend=a.get("backend"))
    served = False
    while True:
        ev = w.next_event(timeout=0.05)
        if ev and ev.get("event") == "drain_requested":
            break
        try:
            epoch = w.prepare(timeout=1.0)
        except TimeoutError_:
            continue
        except EpochError as e:
            note("superseded", error=str(e))
            continue
        assert w.switch() == epoch
        _, _, rank, world = w.state()
        total = w.all_reduce_sum([1.0])[0]
        assert total == world, f"epoch {epoch}: the check summed to {total}, not {world}"
        note("switched", epoch=epoch, rank=rank, world=world, sum=total)
        if not served:
            w.serving()
            served = True
            note("serving")
        # Two requests in flight: a drain now must wait for this member's reports.
        w.report_load(2, 1)
    assert served, "drained before it ever served"
    w.drain()
    note("draining")
    for n in (1, 0):
        time.sleep(REPORT_GAP)
        w.report_load(n, 0)
        note("reported", in_flight=n)
    w.close()
    note("done")
