"""Fixtures: a stand-in node agent (the agent's real local API server and worker
placement, `cargo build --example local_agent -p hcomm-worker`; path in
HCOMM_LOCAL_AGENT) and the library (HCOMM_WORKER_LIB). `agent/worker/tests/python.rs`
builds both and runs these tests; run by hand:

    cargo build --workspace --example local_agent
    HCOMM_LOCAL_AGENT=target/debug/examples/local_agent \
    HCOMM_WORKER_LIB=target/debug/libhcomm_worker.so python3 -m pytest agent/worker/python
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Every wait on the stand-in agent is bounded.
ANSWER_TIMEOUT = 10


def _free_port_base(span=128):
    """A base where base .. base+span are free on loopback right now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + span > 65000:
            continue
        ok = True
        for p in (base, base + 64, base + 65, base + 66, base + 67):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port range on loopback")


class Agent:
    """Drives the stand-in agent over its stdin/stdout."""

    def __init__(self, proc):
        self.proc = proc

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_TIMEOUT)
        if not ready:
            raise TimeoutError(f"the stand-in agent did not answer {line!r}")
        answer = self.proc.stdout.readline().strip()
        if not answer or answer.startswith("error"):
            raise RuntimeError(f"{line!r}: {answer!r} (stderr: {self.proc.stderr.read()})")
        return answer

    def pod(self, name):
        return self.ask(f"pod {name}").split(" ", 1)[1]

    def epoch(self, epoch, *pods):
        self.ask(f"epoch {epoch} " + " ".join(pods))

    def drain(self, pod):
        self.ask(f"drain {pod}")

    def show(self, pod):
        import json

        return json.loads(self.ask(f"show {pod}"))


@pytest.fixture
def agent(tmp_path):
    exe = os.environ.get("HCOMM_LOCAL_AGENT")
    if not exe or not Path(exe).is_file():
        pytest.fail("HCOMM_LOCAL_AGENT must name the built local_agent example")
    proc = subprocess.Popen(
        [exe, "--dir", str(tmp_path / "pods"), "--port-base", str(_free_port_base())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield Agent(proc)
    finally:
        try:
            proc.stdin.write("quit\n")
            proc.stdin.flush()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
