#!/usr/bin/env python3
"""tools/peer_bench_client.py API N TOKENS LABEL — N streamed completions of TOKENS tokens, one
at a time, timed where the client sees them: time to the first token, the gap from the first to
the second (where a split placement hands the KV over), and the mean gap after that. Prints the
medians over the N requests (tools/peer_bench.sh)."""
import json
import statistics
import sys
import time
import urllib.request

api, n, tokens, label = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ttft, second, later = [], [], []
body = json.dumps({"prompt": "Once upon a time", "max_tokens": tokens, "temperature": 0,
                   "stream": True}).encode()
for _ in range(n):
    req = urllib.request.Request(api + "/v1/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    stamps = []
    with urllib.request.urlopen(req) as r:
        for line in r:
            if line.startswith(b"data: {"):
                c = json.loads(line[6:])
                if c.get("choices") and c["choices"][0].get("text") is not None:
                    stamps.append(time.perf_counter())
    ttft.append(stamps[0] - t0)
    second.append(stamps[1] - stamps[0])
    later.append((stamps[-1] - stamps[1]) / (len(stamps) - 2))
ms = lambda v: statistics.median(v) * 1e3
print(f"{label}: TTFT {ms(ttft):.2f} ms, first->second token {ms(second):.2f} ms, "
      f"later tokens {ms(later):.3f} ms apart (medians of {n} requests of {tokens} tokens)")
