#!/usr/bin/env python3
"""Decode time per token with and without a grammar (issue 24: the mask must add < 5 % to decode
ms/token at batch 1 on the GPU path). One request at a time, streamed; TPOT = (last token's
arrival - first token's) / (tokens - 1), taken by the client for every chunk that carries text.
Modes: plain, json_object and json_schema (response_format), gbnf (the llama.cpp-style `grammar` extension).
Usage: grammar_tpot.py --api URL [--reps N] [--max-tokens N]; prints one JSON line per mode."""
import argparse, json, statistics, time, urllib.request

MODES = {
    "plain": {},
    "json_object": {"response_format": {"type": "json_object"}},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "story", "schema": {"type": "object", "properties": {"story": {"type": "string"}},
                                    "required": ["story"], "additionalProperties": False}}}},
    "gbnf": {"grammar": 'root ::= [a-z ]+'},
}


def one(api, extra, max_tokens):
    body = {"prompt": "Write a long story about a dog.", "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    body.update(extra)
    req = urllib.request.Request(api + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if any(c.get("text") for c in ev.get("choices", [])):
                times.append(time.monotonic())
    return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None, len(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    a = ap.parse_args()
    for name, extra in MODES.items():
        one(a.api, extra, 8)  # warm: grammar compiled, tables built
        tp, ns = [], []
        for _ in range(a.reps):
            t, n = one(a.api, extra, a.max_tokens)
            ns.append(n)
            if t is not None:
                tp.append(t * 1e3)
        print(json.dumps({"mode": name, "tpot_ms_median": round(statistics.median(tp), 4) if tp else None,
                          "tpot_ms_all": [round(x, 4) for x in tp], "tokens": ns}), flush=True)


if __name__ == "__main__":
    main()
