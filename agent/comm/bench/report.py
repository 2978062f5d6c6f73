#!/usr/bin/python3
"""Renders the collective section of docs/benchmarks.md from a recorded run's raw rows: one
comparison table per scenario, world size and primitive, and the targets of issue 3 checked as
ratios from that run.

The raw data lives outside the crates, in docs/benchmarks/data/ (run.sh files each run there):
  <run>.jsonl.gz      the rows, one JSON object per line (gzip -n, so the bytes are reproducible)
  <run>.meta.txt      the machine, load and versions of the run
  <run>.commands.txt  the exact commands the run executed
  current             the name of the run whose tables docs/benchmarks.md shows
and the prose kept across runs in docs/benchmarks/collectives-notes.md.

  python3 agent/comm/bench/report.py            # rewrite docs/benchmarks.md from the data
  python3 agent/comm/bench/report.py --check    # exit 1 when the doc is not what the data gives

Only the text between the collectives markers is rewritten; the rest of the document (the
scale-out section, written by `cargo scaleout-bench --output docs/benchmarks.md`) is kept.
"""

import argparse
import difflib
import gzip
import json
import os
import sys
from collections import defaultdict

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
DATA = os.path.join(ROOT, "docs", "benchmarks", "data")
NOTES = os.path.join(ROOT, "docs", "benchmarks", "collectives-notes.md")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN = "<!-- collectives:begin -->"
END = "<!-- collectives:end -->"

IMPLS = [  # (impl, mechanism) -> column title
    (("hcomm", "tcp"), "hcomm tcp"),
    (("openmpi", "tcp"), "Open MPI tcp"),
    (("openmpi", "sm"), "Open MPI sm"),
    (("gloo", "tcp"), "Gloo"),
]
OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
MIB = 1 << 20


def human(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}"
    return f"{b} B"


def load(path):
    """Rows, the one-stream link limit per scenario, and the per-link limit with every ring
    link busy at once (mean, min) per scenario."""
    rows, links, ring_links = [], {}, {}
    opener = gzip.open if path.endswith(".gz") else open
    for line in opener(path, "rt", encoding="utf-8"):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        mech, _, scen = r["transport"].partition("/")
        if r["impl"] == "iperf3":
            links[scen] = r["busbw"]
            continue
        if r["impl"] == "iperf3-ring":
            ring_links[scen] = (r["busbw"], r["min_busbw"])
            continue
        r["mech"], r["scen"] = mech, scen
        rows.append(r)
    return rows, links, ring_links


def nominal(b):
    """Rows are keyed by the nominal power-of-two size (blocks are rounded down per world)."""
    p = 1
    while p * 2 <= b + 64:
        p *= 2
    return p


def tables(rows, links, ring_links):
    by = defaultdict(dict)  # (scen, world, op) -> {(impl,mech): {size: row}}
    for r in rows:
        by[(r["scen"], r["world"], r["op"])].setdefault((r["impl"], r["mech"]), {})[nominal(r["bytes"])] = r
    out = []
    scen_order = sorted({k[0] for k in by}, key=lambda s: (s != "loopback", s))
    for scen in scen_order:
        title = "Loopback (ranks as processes on one host)" if scen == "loopback" else \
            f"Simulated hosts, links shaped to {scen} full duplex (tc tbf, network namespaces)"
        out.append(f"\n### {title}\n")
        if scen in links:
            out.append(f"iperf3 link limit (one TCP stream, host 1 → host 0): **{links[scen]:.3f} GB/s** "
                       f"({links[scen] * 8:.2f} Gbit/s).\n")
        if scen in ring_links:
            mean, low = ring_links[scen]
            out.append(f"iperf3 on every ring link at once (host i → host i+1, one stream each, the "
                       f"traffic of a ring all-reduce): **{mean:.3f} GB/s** per link on average, "
                       f"{low:.3f} GB/s on the slowest.\n")
        for world in sorted({k[1] for k in by if k[0] == scen}):
            for op in OPS:
                cols = by.get((scen, world, op))
                if not cols:
                    continue
                present = [(k, t) for k, t in IMPLS if k in cols]
                sizes = sorted({s for k, _ in present for s in cols[k]})
                out.append(f"\n**{op}, {world} ranks** — time (µs) / busbw (GB/s)\n")
                out.append("| size | " + " | ".join(t for _, t in present) + " | hcomm ÷ best other (busbw) |")
                out.append("|---:|" + "---:|" * len(present) + "---:|")
                for s in sizes:
                    cells, others = [], []
                    for k, _ in present:
                        r = cols[k].get(s)
                        if r is None:
                            cells.append("—")
                            continue
                        wrong = f" ✗{r['wrong']}" if r["wrong"] else ""
                        cells.append(f"{r['time_us']:.0f} / {r['busbw']:.3f}{wrong}")
                        if k[0] != "hcomm":
                            others.append(r["busbw"])
                    h = cols.get(("hcomm", "tcp"), {}).get(s)
                    ratio = f"{h['busbw'] / max(others):.2f}" if h and others and max(others) > 0 else "—"
                    out.append(f"| {human(s)} | " + " | ".join(cells) + f" | {ratio} |")
    return out


def targets(rows, links, ring_links):
    """Issue 3's targets, as ratios from this run. Rows marked ℹ️ give context and are not
    counted: the ring against what iperf3 gets with every ring link busy at once, which on
    this 2-core machine is the CPU's limit rather than the links'."""
    idx = {(r["impl"], r["mech"], r["scen"], r["world"], r["op"], nominal(r["bytes"])): r for r in rows}
    out = ["\n## Targets (ratios within one run of each scenario)\n",
           "| target | scenario | ranks | size | hcomm | reference | ratio | met |", "|---|---|---:|---:|---:|---:|---:|:-:|"]
    keys = sorted({(r["scen"], r["world"]) for r in rows if r["impl"] == "hcomm"})
    for scen, world in keys:
        hrows = {k[5]: v for k, v in idx.items() if k[:5] == ("hcomm", "tcp", scen, world, "all_reduce")}
        if scen in links:
            for s in sorted(x for x in hrows if x >= 16 * MIB):
                h = hrows[s]["busbw"]
                ratio = h / links[scen]
                out.append(f"| ring all-reduce busbw ≥ 90% of link | {scen} | {world} | {human(s)} | "
                           f"{h:.3f} GB/s | iperf3 {links[scen]:.3f} GB/s | {ratio:.2f} | {'✅' if ratio >= 0.9 else '❌'} |")
                if scen in ring_links:
                    mean = ring_links[scen][0]
                    out.append(f"| (context) ring all-reduce busbw against every ring link busy at once | "
                               f"{scen} | {world} | {human(s)} | {h:.3f} GB/s | iperf3 ×{world} {mean:.3f} GB/s | "
                               f"{h / mean:.2f} | ℹ️ |")
        # The references: Open MPI over TCP and Gloo (shared memory is shown, not a target).
        for (impl, mech), title in (IMPLS[1], IMPLS[3]):
            ref = {k[5]: v for k, v in idx.items() if k[:5] == (impl, mech, scen, world, "all_reduce")}
            for s in sorted(x for x in hrows if x >= MIB and x in ref):
                h, o = hrows[s]["busbw"], ref[s]["busbw"]
                ratio = h / o if o > 0 else float("inf")
                out.append(f"| all-reduce busbw ≥ {title} (≥ 1 MiB) | {scen} | {world} | {human(s)} | "
                           f"{h:.3f} GB/s | {o:.3f} GB/s | {ratio:.2f} | {'✅' if ratio >= 1 else '❌'} |")
            s = 4096
            if s in hrows and s in ref:
                h, o = hrows[s]["time_us"], ref[s]["time_us"]
                ratio = h / o
                out.append(f"| 4 KiB all-reduce latency ≤ {title} | {scen} | {world} | 4 KiB | "
                           f"{h:.0f} µs | {o:.0f} µs | {ratio:.2f} | {'✅' if ratio <= 1 else '❌'} |")
    met = sum(1 for line in out if line.endswith("✅ |"))
    total = sum(1 for line in out if line.endswith(("✅ |", "❌ |")))
    out.insert(1, f"Met {met} of {total} checks.\n")
    return out


def render(results, meta, commands, notes):
    """The collective section, title to exact commands, from one run's files."""
    rows, links, ring_links = load(results)
    with open(meta, encoding="utf-8") as f:
        meta_text = f.read().strip()
    with open(commands, encoding="utf-8") as f:
        cmds = f.read().strip()
    doc = ["# Collective benchmarks",
           "",
           "Generated by `python3 agent/comm/bench/report.py` from the raw rows of the run named in "
           "docs/benchmarks/data/current (`agent/comm/bench/run.sh` records a run there; do not edit "
           "the tables by hand). Rows follow nccl-tests: *size* is the all-reduce/broadcast buffer, the all-gather output, the "
           "reduce-scatter input and the all-to-all send buffer, in f32; *time* is the mean per iteration "
           "of the slowest rank; algbw = size / time; busbw = algbw × 2(n−1)/n for all-reduce, (n−1)/n for "
           "all-gather, reduce-scatter and all-to-all, 1 for broadcast. ✗N marks N wrong elements in the "
           "checked iteration. Within a scenario every implementation runs with the same sizes and "
           "iteration policy (agent/comm/bench/policy.py) in the same run.",
           "",
           "## Run",
           "",
           "```text", meta_text, "```"]
    if notes:
        with open(notes, encoding="utf-8") as f:
            doc += ["", f.read().strip()]
    doc += targets(rows, links, ring_links)
    doc += ["", "## Results"]
    doc += tables(rows, links, ring_links)
    doc += ["", "## Exact commands", "", "```sh", cmds, "```", ""]
    return "\n".join(doc)


def splice(document, section):
    """`document` with the text between the markers replaced by `section` (markers kept); the
    section alone, between markers, when the document has none yet."""
    block = f"{BEGIN}\n{section}{END}\n"
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        return block + ("\n" + document if document else "")
    rest = document[end + len(END):]
    return document[:start] + block + (rest[1:] if rest.startswith("\n") else rest)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="the run's name in docs/benchmarks/data (default: the one in `current`)")
    p.add_argument("--data", default=DATA, help="the folder of recorded runs")
    p.add_argument("--notes", default=NOTES, help="markdown kept across runs, shown after the run's facts")
    p.add_argument("--out", default=DOC, help="the document whose collective section is rewritten")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when --out differs")
    a = p.parse_args()
    run = a.run
    if not run:
        with open(os.path.join(a.data, "current"), encoding="utf-8") as f:
            run = f.read().strip()
    base = os.path.join(a.data, run)
    section = render(base + ".jsonl.gz", base + ".meta.txt", base + ".commands.txt",
                     a.notes if os.path.exists(a.notes) else None)
    old = open(a.out, encoding="utf-8").read() if os.path.exists(a.out) else ""
    new = splice(old, section)
    if a.check:
        if new != old:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), a.out, f"{a.out} from {base}.*", n=1))
            print(f"{a.out} is not what run {run} gives; run agent/comm/bench/report.py", file=sys.stderr)
            sys.exit(1)
        print(f"{a.out}: collective section matches run {run}")
        return
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"wrote {a.out} from run {run}", file=sys.stderr)


if __name__ == "__main__":
    main()
