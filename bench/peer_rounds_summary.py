#!/usr/bin/env python3
"""bench/peer_rounds_summary.py ROUNDS_FILE... — the table BENCHMARKS.md reports from the
interleaved rounds of bench/peer_quiet_run.sh (its rounds-TLS-SIZE files: a header naming the
peer_bench columns, then one line a round: the load, each column's MiB/s, ucx_perftest's).
Per column: MiB/s median (range); ours / perftest of the same round, median (range) and the
rounds at or above 80 %; the column / the first column of the same round, median (range).
A round with a failed run ("fail") counts for the columns that ran."""
import statistics
import sys


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
        v = [(num(r[1 + i]), p, num(r[1])) for r, p in zip(rows, pf) if len(r) > 1 + i]
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
        if i:
            line += f" | / {names[0]} x{statistics.median(rel):.2f} ({min(rel):.2f}-{max(rel):.2f})"
        print(line)
    p = [x for x in pf if x]
    if p:
        print(f"  ucx_perftest tag_bw: {med(p)} MiB/s")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for f in sys.argv[1:]:
        summary(f)
