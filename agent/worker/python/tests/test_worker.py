"""The Python package against the agent's local API server: epoch switch (make-before-
break, grow 2 -> 3), load report, drain."""

import threading

import pytest

from hcomm_worker import EpochError, RefusedError, Worker

PREPARE_TIMEOUT = 30


def open_worker(agent, name):
    return Worker.open(socket=agent.pod(name), pod=name, namespace="test", timeout=5)


def prepare_all(workers):
    """Every member of an epoch builds its communicator together (the rendezvous needs
    them all), each on its own thread, as engines on different hosts would."""
    results, errors = {}, []

    def run(i, w):
        try:
            results[i] = w.prepare(timeout=PREPARE_TIMEOUT)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PREPARE_TIMEOUT + 10)
    assert not errors, errors
    return [results[i] for i in range(len(workers))]


def all_reduce_all(workers, values_of):
    out, errors = {}, []

    def run(i, w):
        try:
            out[i] = w.all_reduce_sum(values_of(i))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return [out[i] for i in range(len(workers))]


def test_an_unverified_member_is_refused_then_serves_its_epoch_after_the_switch(agent):
    a = open_worker(agent, "w-0")
    with pytest.raises(RefusedError, match="not verified"):
        a.assignment()
    with pytest.raises(EpochError, match="nothing prepared|no communicator prepared"):
        a.switch()
    b = open_worker(agent, "w-1")
    agent.epoch(1, "w-0", "w-1")
    assert prepare_all([a, b]) == [1, 1]
    assert a.state() == (None, 1, None, None), "prepared, not serving before the switch"
    assert a.switch() == 1 and b.switch() == 1
    assert a.state() == (1, None, 0, 2)
    assert b.state() == (1, None, 1, 2)
    assert all_reduce_all([a, b], lambda i: [1.0 + i, 10.0]) == [[3.0, 20.0]] * 2
    a.close()
    b.close()


def test_a_new_epoch_is_built_beside_the_serving_one_and_switched_at_the_safe_point(agent):
    ws = [open_worker(agent, f"w-{i}") for i in range(3)]
    agent.epoch(1, "w-0", "w-1")
    prepare_all(ws[:2])
    for w in ws[:2]:
        w.switch()
    # The event stream opens at the first look (nothing pending yet).
    assert ws[0].next_event(timeout=0.2) is None
    # A third member joins: epoch 2. The two members keep serving epoch 1 while all
    # three build epoch 2.
    agent.epoch(2, "w-0", "w-1", "w-2")
    assert ws[0].next_event(timeout=5) == {"event": "epoch_changed", "epoch": 2}
    prepared = {}

    def build():
        prepared["epochs"] = prepare_all(ws)

    t = threading.Thread(target=build)
    t.start()
    # Still serving epoch 1 meanwhile (the old communicator is untouched by the build).
    assert all_reduce_all(ws[:2], lambda i: [1.0]) == [[2.0]] * 2
    t.join(PREPARE_TIMEOUT + 20)
    assert prepared["epochs"] == [2, 2, 2]
    assert ws[0].state()[:2] == (1, 2)
    for w in ws:
        assert w.switch() == 2
    assert [w.state() for w in ws] == [(2, None, r, 3) for r in range(3)]
    assert all_reduce_all(ws, lambda i: [float(i)]) == [[3.0]] * 3
    with pytest.raises(EpochError):
        ws[0].switch()
    for w in ws:
        w.close()


def test_load_reports_reach_the_agent_and_a_drain_is_heard_and_reported(agent):
    w = open_worker(agent, "w-0")
    w.report_load(in_flight=3, queue_depth=7)
    shown = agent.show("w-0")
    assert shown["in_flight"] == 3
    assert shown["load"] == {"in_flight": 3, "queue_depth": 7, "draining": False}
    w.serving()
    assert agent.show("w-0")["serving"] is True
    assert w.next_event(timeout=0.2) is None
    agent.drain("w-0")
    assert w.next_event(timeout=5) == {"event": "drain_requested", "deadline": None}
    w.drain()
    assert agent.show("w-0")["load"]["draining"] is True
    # The drain's progress: the count falls to zero, the agent's drain wait ends there.
    w.report_load(in_flight=1)
    assert agent.show("w-0")["load"] == {"in_flight": 1, "queue_depth": 0, "draining": True}
    w.report_load(in_flight=0)
    assert agent.show("w-0")["in_flight"] == 0
    w.close()
