#!/usr/bin/env python3
"""The time between tokens of concurrent decodes while one long prompt prefills (issue 22: "the TBT
of concurrent GPU decodes stays within the budget while a 128K sparse prompt prefills").

K streams decode on the device (streamed /v1/completions, temperature 0, restarted if one ends);
after a warm-up, one long prompt (random token ids, seeded; "cache_prompt": false, max_tokens 1) is
sent with the chosen prefill ("sparse_prefill" false for dense, or a method object). Every text
chunk's arrival is taken by the client. Reported per phase (before the long prompt / while it
prefills): gap count, p50, p99 and max of the time between consecutive tokens of a stream, and the
long prompt's TTFT; also the gaps in the last quarter of the prefill's time (its deepest chunks).
A prompt not answered within --max-wait seconds is reported as far as it went ("finished": false)
and dropped. The daemon's --tbt-budget-ms (default 50) bounds the prefill time put between
two decode steps, so a gap while prefilling should stay near budget + one decode step.
With --admin URL (the daemon's admin listener) it also reports the prefill calls the daemon made
for the long prompt (tandem_device_prefill_chunks_total before and after) and how many of them
were layer-split calls that left their chunk unfinished (tandem_device_prefill_split_calls_total),
and the calls that overran what was left of the budget with the sum of their overruns
(tandem_device_prefill_over_budget_calls_total / _seconds_total): a gap past budget + step that
they do not account for came from elsewhere (the decode step itself, the client).
Usage: tbt_during_prefill.py --api URL --tokens N [--streams K] [--mode dense|xattention|trishape|
flexprefill] [--vocab V] [--admin URL] [--max-wait S] [--gaps FILE]; prints one JSON line."""
import argparse, http.client, json, random, socket, statistics, threading, time, urllib.parse


def stream_loop(api, stop, arrivals, idx, max_tokens, errors):
    u = urllib.parse.urlparse(api)
    while not stop.is_set():
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        body = {"prompt": "Once upon a time, in a quiet town by the sea, %d" % idx, "max_tokens": max_tokens,
                "temperature": 0, "stream": True}
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            errors.append(r.read().decode(errors="replace")[:200])
            stop.wait(1.0)
            c.close()
            continue
        last = None
        while not stop.is_set():
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if any(ch.get("text") for ch in ev.get("choices", [])):
                now = time.monotonic()
                if last is not None:
                    arrivals.append((now, now - last, idx))
                last = now
        c.close()


def prefill_calls(admin, family="tandem_device_prefill_chunks_total"):
    """The daemon's prefill calls so far (summed over devices; family: the metric), or None."""
    if not admin:
        return None
    u = urllib.parse.urlparse(admin)
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode(errors="replace")
        c.close()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(family))


def stats(gaps):
    if not gaps:
        return {"n": 0}
    g = sorted(x * 1e3 for x in gaps)
    return {"n": len(g), "p50_ms": round(statistics.median(g), 2),
            "p99_ms": round(g[min(len(g) - 1, int(0.99 * len(g)))], 2), "max_ms": round(g[-1], 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--mode", default="xattention")
    ap.add_argument("--vocab", type=int, default=128000)
    ap.add_argument("--warm", type=float, default=5.0)
    ap.add_argument("--stream-tokens", type=int, default=3000)
    ap.add_argument("--admin", default=None)
    ap.add_argument("--max-wait", type=float, default=1200.0)
    ap.add_argument("--gaps", default=None,
                    help="write every gap to this file (JSON: t0, t1 and [arrival, gap, stream] rows, "
                         "seconds of time.monotonic) for bench/tbt_trace.py")
    a = ap.parse_args()
    stop = threading.Event()
    arrivals, errors = [], []
    ts = [threading.Thread(target=stream_loop, args=(a.api, stop, arrivals, i, a.stream_tokens, errors),
                           daemon=True)
          for i in range(a.streams)]
    for t in ts:
        t.start()
    time.sleep(a.warm)
    rng = random.Random(1)
    prompt = [rng.randrange(min(1000, a.vocab // 2), a.vocab) for _ in range(a.tokens)]
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "cache_prompt": False,
            "sparse_prefill": False if a.mode == "dense" else {"mode": a.mode}}
    u = urllib.parse.urlparse(a.api)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=a.max_wait)
    calls0 = prefill_calls(a.admin)
    split0 = prefill_calls(a.admin, "tandem_device_prefill_split_calls_total")
    over0 = prefill_calls(a.admin, "tandem_device_prefill_over_budget_calls_total")
    overs0 = prefill_calls(a.admin, "tandem_device_prefill_over_budget_seconds_total")
    t0 = time.monotonic()
    status, resp = None, {}
    try:
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        status = r.status
        resp = json.loads(r.read() or b"{}")
    except (socket.timeout, TimeoutError):
        pass  # not finished within --max-wait: what was seen so far is reported, the request dropped
    t1 = time.monotonic()
    c.close()
    calls1 = prefill_calls(a.admin)
    split1 = prefill_calls(a.admin, "tandem_device_prefill_split_calls_total")
    over1 = prefill_calls(a.admin, "tandem_device_prefill_over_budget_calls_total")
    overs1 = prefill_calls(a.admin, "tandem_device_prefill_over_budget_seconds_total")
    time.sleep(1.0)
    stop.set()
    # a gap belongs to a phase when it overlaps it (it ends after the phase starts and began
    # before it ends): the gap a whole unchunked prefill makes ends just after t1, so counting
    # arrivals inside [t0, t1] alone missed it
    def overlapping(lo, hi):
        return [g for (t, g, _) in arrivals if t > lo and t - g < hi]
    before = [g for (t, g, _) in arrivals if t < t0]
    during = overlapping(t0, t1)
    last = overlapping(t1 - (t1 - t0) / 4, t1)
    usage = resp.get("usage", {})
    if a.gaps:
        with open(a.gaps, "w") as f:
            json.dump({"mode": a.mode, "t0": t0, "t1": t1,
                       "gaps": [[round(t, 6), round(g, 6), i] for (t, g, i) in arrivals]}, f)
    print(json.dumps({"mode": a.mode, "tokens": a.tokens, "streams": a.streams, "status": status,
                      "finished": status is not None, "ttft_s": round(t1 - t0, 3),
                      "prefill_density": usage.get("prefill_density"),
                      "prefill_calls": None if calls0 is None or calls1 is None else calls1 - calls0,
                      "split_calls": None if split0 is None or split1 is None else split1 - split0,
                      # calls beside the decodes that overran the budget's rest, and the sum of
                      # the overruns (ms): gaps past budget + step that these do not explain
                      # come from elsewhere (the decode step, the client)
                      "over_budget_calls": None if over0 is None or over1 is None else over1 - over0,
                      "over_budget_ms": None if overs0 is None or overs1 is None
                      else round((overs1 - overs0) * 1e3, 1),
                      "before": stats(before), "during": stats(during),
                      "during_last_quarter": stats(last),
                      "error": resp.get("error"), "stream_errors": errors[:3]}))


if __name__ == "__main__":
    main()
