#!/usr/bin/env python3
"""bench/peer_rounds_summary.py [--groups I,J,...] ROUNDS_FILE... — the table BENCHMARKS.md reports
from the interleaved rounds of bench/peer_quiet_run.sh (its rounds-TLS-SIZE files: a header naming
the peer_bench columns, then one line a round: the load, each column's MiB/s, ucx_perftest's).
Per column: MiB/s median (range); ours / perftest of the same round, median (range) and the
rounds at or above 80 %; the column / its reference column of the same round, median (range):
the first column, or with --groups the nearest group start at or before it (columns counted
from 0: "--groups 0,9" compares columns 1-8 with column 0 and 10- with column 9).
A round with a failed run ("fail") counts for the columns that ran.
bench/peer_rounds_summary.py --stages STAGES_FILE: the medians over the rounds of each column's
stage clocks (the "# sender" and "# node" lines peer_bench prints, us per chunk) as a table."""
import re
import statistics
import sys

GROUPS = [0]


def med(v):
    return f"{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})"


def summary(path):
    head, rows = None, []
    for line in open(path):
        if line.startswith("#"):
            head = head or line
        elif line.strip():
            rows.append(line.split())
    names = []
    if head and "# load | " in head and " (MiB/s)" in head:
        names = [n.strip() or "?" for n in head.split("# load | ", 1)[1].split(" (MiB/s)", 1)[0].split("|")]
    n = len(names) or (len(rows[0]) - 2 if rows else 0)
    names = [n.replace("peer_bench.before", "before").replace("peer_bench", "").strip() or "default" for n in names] or [f"col{i}" for i in range(n)]
    num = lambda x: float(x) if x.replace(".", "", 1).isdigit() else None
    pf = [num(r[1 + n]) if len(r) > 1 + n else None for r in rows]
    print(f"{path}: {len(rows)} rounds, load {min(r[0] for r in rows)}-{max(r[0] for r in rows)}")
    for i, name in enumerate(names):
        ref = max(g for g in GROUPS if g <= i) if any(g <= i for g in GROUPS) else 0
        v = [(num(r[1 + i]), p, num(r[1 + ref])) for r, p in zip(rows, pf) if len(r) > 1 + i]
        mib = [x for x, _, _ in v if x]
        rat = [x / p for x, p, _ in v if x and p]
        rel = [x / b for x, _, b in v if x and b]
        if not mib:
            print(f"  {name}: no run")
            continue
        line = f"  {name}: {med(mib)} MiB/s"
        if rat:
            line += (f" | / perftest {statistics.median(rat):.0%} ({min(rat):.0%}-{max(rat):.0%}; "
                     f"{sum(x >= 0.8 for x in rat)} of {len(rat)} at 80 %)")
        if i != ref and rel:
            line += f" | / {names[ref]} x{statistics.median(rel):.2f} ({min(rel):.2f}-{max(rel):.2f})"
        print(line)
    p = [x for x in pf if x]
    if p:
        print(f"  ucx_perftest tag_bw: {med(p)} MiB/s")


SENDER = ["in all", "room in the window of sends", "tagged send started", "answers for room", "answers at a run's end"]
NODE = ["tagged receive (post to done)", "CRC (node's thread)", "kv_rx: CRC (its thread)", "nothing coming (waits between chunks)",
        "wait for a free slot", "push to kv_rx"]


def stages(path):
    cols, cur = {}, None
    for line in open(path):
        m = re.match(r"## \S+ round \d+: UCX_TLS=\S+ (.*)", line)
        if m:
            cur = re.sub(r"\S*/bin/", "", m.group(1)).strip()
            cols.setdefault(cur, {})
            continue
        if cur is None or not line.startswith(("# sender", "# node")):
            continue
        for part in line.split(":", 1)[1].split(";"):
            m = re.match(r"\s*(.*?)\s+([0-9.]+) us\s*$", part) or re.match(r"\s*()([0-9.]+) us in all\s*$", part)
            if m:
                cols[cur].setdefault(m.group(1) or "in all", []).append(float(m.group(2)))
    keys = SENDER + NODE
    print("| column | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name, d in cols.items():
        cells = [f"{statistics.median(d[k]):.0f}" if d.get(k) else "" for k in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) >= 2 and a[0] == "--stages":
        for f in a[1:]:
            stages(f)
        sys.exit(0)
    if len(a) >= 2 and a[0] == "--groups":
        GROUPS = sorted({int(x) for x in a[1].split(",")} | {0})
        a = a[2:]
    if not a:
        sys.exit(__doc__)
    for f in a:
        summary(f)
