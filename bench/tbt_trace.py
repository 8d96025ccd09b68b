#!/usr/bin/env python3
"""Where the long gaps between tokens went (issue 22): reads a worker's TANDEM_SCHED_TRACE log
(scheduler/sched_worker.c: I / D / P lines, CLOCK_MONOTONIC seconds) and the client's gaps
(bench/tbt_during_prefill.py --gaps: t0, t1 of the long prompt and every [arrival, gap, stream])
of one or more modes, and prints one JSON line per mode:

  daemon_gaps   the time between two decode steps' token hand-offs (D t1 to D t1) while the long
                prompt prefilled, p50 / p99 / max, and over the target (budget + the median step
                before the prompt): how many, and what their excess over the target was made of:
                  prefill  the prefill calls between the two steps past the budget
                  step     the decode step past its median before the prompt
                  other    the rest (the worker's inbox, reaping, the loop between calls)
  client        the client's gaps over the same time (they overlap it), p50 / p99 / max; those of
                one token each (a gap that spans several hand-offs held a token without text: the
                client sees text only) and how many spanned more; its delay behind the daemon:
                each arrival minus the last hand-off before it
  calls         the prefill calls beside decodes: actual / predicted time (p50 / p90 / p99 / max)
                for whole and layer-split calls, planned / predicted (the cost model's margin and
                a new size's extra), and how many overran what was left of the budget
                (with the overrun, ms: the over-budget counters' numbers)
  worst         the longest daemon gaps, each with its step, its calls (tokens, pos, layers,
                predicted and actual ms, budget left) and its other time
  before        the same daemon and client gap figures for the decoding before the prompt

Usage: tbt_trace.py --trace sched_trace.0 --gaps gaps_MODE.json [--gaps ...] [--budget-ms 50]
[--worst 12]"""
import argparse, bisect, json, statistics


def pct(xs, q):
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(xs, scale=1e3):
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "p50": round(statistics.median(xs) * scale, 2), "p99": round(pct(xs, 0.99) * scale, 2),
            "max": round(max(xs) * scale, 2)}


def read_trace(path):
    steps, calls = [], []  # steps: (t0, t1, rows); calls: dict
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "D" and len(w) >= 4:
                steps.append((float(w[1]), float(w[2]), int(w[3])))
            elif w[0] == "P" and len(w) >= 11:
                calls.append({"t0": float(w[1]), "t1": float(w[2]), "kind": int(w[3]), "tokens": int(w[4]),
                              "pos": int(w[5]), "layer0": int(w[6]), "layers": int(w[7]), "pred": float(w[8]),
                              "left": float(w[9]), "first": int(w[10]),
                              "plan": float(w[11]) if len(w) > 11 else float(w[8])})
    return steps, calls


def gaps_between(steps, calls, lo, hi, step_med, budget, target):
    """Daemon gaps whose end lies in (lo, hi], each with its parts."""
    ends = [s[1] for s in steps]
    starts = [c["t0"] for c in calls]
    out = []
    i = bisect.bisect_right(ends, lo)
    for j in range(max(i, 1), len(steps)):
        if steps[j][1] > hi:
            break
        a, (s0, s1, rows) = steps[j - 1][1], steps[j]
        k0, k1 = bisect.bisect_left(starts, a), bisect.bisect_left(starts, s0)
        cs = calls[k0:k1]
        pf = sum(c["t1"] - c["t0"] for c in cs)
        g = s1 - a
        out.append({"end": s1, "gap": g, "step": s1 - s0, "prefill": pf, "other": g - (s1 - s0) - pf,
                    "calls": cs, "rows": rows})
    return out


def excess(gs, step_med, budget, target):
    over = [g for g in gs if g["gap"] > target]
    parts = {"prefill": 0.0, "step": 0.0, "other": 0.0}
    for g in over:
        parts["prefill"] += max(0.0, g["prefill"] - budget)
        parts["step"] += max(0.0, g["step"] - step_med)
        parts["other"] += max(0.0, g["other"])
    return {"over_target": len(over), "of": len(gs),
            "excess_ms_sum": {k: round(v * 1e3, 1) for k, v in parts.items()},
            # which part is the largest in each gap over the target
            "largest_part": {k: sum(1 for g in over if max(
                (max(0.0, g["prefill"] - budget), "prefill"), (max(0.0, g["step"] - step_med), "step"),
                (max(0.0, g["other"]), "other"))[1] == k) for k in parts}}


def spans(steps, rows):
    """Per client gap, how many token hand-offs it spans: more than one when a token brought no
    text (a partial UTF-8 character held back; the client sees only text): such a gap is not one
    token's."""
    ends = [s[1] for s in steps]
    return [bisect.bisect_right(ends, t) - bisect.bisect_right(ends, t - g) for (t, g, _) in rows]


def client_delay(steps, arrivals):
    ends = [s[1] for s in steps]
    d = []
    for t in arrivals:
        i = bisect.bisect_right(ends, t) - 1
        if i >= 0:
            d.append(t - ends[i])
    return d


def ratios(cs):
    r = [c["actual"] / c["pred"] for c in cs if c["pred"] > 0]
    if not r:
        return {"n": 0}
    return {"n": len(r), "p50": round(statistics.median(r), 3), "p90": round(pct(r, 0.9), 3),
            "p99": round(pct(r, 0.99), 3), "max": round(max(r), 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--gaps", action="append", required=True)
    ap.add_argument("--budget-ms", type=float, default=50.0)
    ap.add_argument("--worst", type=int, default=12)
    a = ap.parse_args()
    steps, calls = read_trace(a.trace)
    for c in calls:
        c["actual"] = c["t1"] - c["t0"]
    budget = a.budget_ms / 1e3
    for path in a.gaps:
        with open(path) as f:
            gj = json.load(f)
        t0, t1 = gj["t0"], gj["t1"]
        rows = gj["gaps"]
        first_arrival = min((r[0] for r in rows), default=t0)
        pre = [s for s in steps if first_arrival <= s[1] < t0]
        step_med = statistics.median([s[1] - s[0] for s in pre]) if pre else 0.0
        before_d = gaps_between(steps, calls, first_arrival, t0, step_med, budget, 0)
        target = budget + step_med
        during = gaps_between(steps, calls, t0, t1, step_med, budget, target)
        cs = [c for c in calls if t0 <= c["t0"] < t1]
        whole = [c for c in cs if c["layers"] == 0]
        split = [c for c in cs if c["layers"] > 0]
        overrun = [c for c in cs if c["actual"] > c["left"]]
        rows_during = [r for r in rows if r[0] > t0 and r[0] - r[1] < t1]
        rows_before = [r for r in rows if r[0] < t0]
        cl_during = [r[1] for r in rows_during]
        cl_before = [r[1] for r in rows_before]
        sp_during, sp_before = spans(steps, rows_during), spans(steps, rows_before)
        worst = sorted(during, key=lambda g: -g["gap"])[:a.worst]
        print(json.dumps({
            "mode": gj.get("mode"), "prefill_s": round(t1 - t0, 3),
            "step_before_ms": summary([s[1] - s[0] for s in pre]),
            "step_during_ms": summary([s[1] - s[0] for s in steps if t0 <= s[0] < t1]),
            "target_ms": round(target * 1e3, 2),
            "daemon_gaps": dict(summary([g["gap"] for g in during]), **excess(during, step_med, budget, target)),
            "client": {"gaps": summary(cl_during),
                       # the gaps of one token each (a gap spanning k > 1 hand-offs held k tokens)
                       "one_token_gaps": summary([g for g, k in zip(cl_during, sp_during) if k == 1]),
                       "multi_token_gaps": sum(1 for k in sp_during if k > 1),
                       "delay_ms": summary(client_delay(steps, [r[0] for r in rows if t0 < r[0] < t1]))},
            "calls": {"n": len(cs), "whole_ratio": ratios(whole), "split_ratio": ratios(split),
                      "first_ratio": ratios([c for c in cs if c["first"]]),
                      "later_ratio": ratios([c for c in cs if not c["first"]]),
                      "later_calls": sum(1 for c in cs if not c["first"]),
                      "plan_over_pred": ratios([dict(actual=c["plan"], pred=c["pred"]) for c in cs]),
                      "over_left": len(overrun),
                      "over_left_ms": round(sum(c["actual"] - max(c["left"], 0) for c in overrun) * 1e3, 1),
                      "per_iteration_ms": summary([g["prefill"] for g in during if g["calls"]])},
            "before": {"daemon_gaps": summary([g["gap"] for g in before_d]), "client_gaps": summary(cl_before),
                       "client_one_token_gaps": summary([g for g, k in zip(cl_before, sp_before) if k == 1]),
                       "multi_token_gaps": sum(1 for k in sp_before if k > 1),
                       "client_delay_ms": summary(client_delay(steps, [r[0] for r in rows if r[0] < t0]))},
            "worst": [{"at_s": round(g["end"] - t0, 3), "gap_ms": round(g["gap"] * 1e3, 2),
                       "step_ms": round(g["step"] * 1e3, 2), "other_ms": round(g["other"] * 1e3, 2),
                       "calls": [[c["tokens"], c["pos"], c["layers"], round(c["pred"] * 1e3, 2),
                                  round(c["actual"] * 1e3, 2), round(c["left"] * 1e3, 2)] for c in g["calls"]]}
                      for g in worst]}))


if __name__ == "__main__":
    main()
