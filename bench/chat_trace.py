#!/usr/bin/env python3
"""A synthetic multi-turn chat trace against a running tandem daemon (Python's standard library
only): C conversations at once, each of T turns; every turn resends the whole conversation so
far (system text, then each user text and the reply the daemon gave) to /v1/completions at
temperature 0, as a chat client does. Prints one JSON object: per turn the texts, cached_tokens
and TTFT (first streamed byte of a token), and in all the prefix-cache hit rate (cached prompt
tokens / prompt tokens) and TTFT p50/p99.

Shape (stated in BENCHMARKS.md): a shared system text of S words, user texts of U words, replies
of R tokens.

  chat_trace.py --api http://127.0.0.1:8080 --conversations 64 --turns 3 [--no-cache]
"""
import argparse
import json
import threading
import time
import urllib.request

WORDS = ("once upon a time there was a little girl named lily she liked to play in the park "
         "with her friend tom one day they found a big red ball under a tree and they were "
         "very happy the sun was warm and the birds sang in the sky").split()


def words(seed, n):
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


def complete(api, prompt, max_tokens, cache, sparse=None):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if not cache:
        body["cache_prompt"] = False
    if sparse is not None:
        body["sparse_prefill"] = sparse
    req = urllib.request.Request(api + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft = None
    text = []
    usage = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                if ch.get("text"):
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    text.append(ch["text"])
    if ttft is None:
        ttft = time.monotonic() - t0
    return "".join(text), usage or {}, ttft


def conversation(args, k, out, errors):
    system = words(0, args.system_words)  # shared by every conversation
    convo = system
    turns = []
    try:
        for t in range(args.turns):
            convo += "\n" + words(k * 31 + t, args.user_words) + "\n"
            text, usage, ttft = complete(args.api, convo, args.reply_tokens, not args.no_cache,
                                         args.sparse)
            details = usage.get("prompt_tokens_details") or {}
            turns.append({"text": text, "prompt_tokens": usage.get("prompt_tokens", 0),
                          "cached_tokens": details.get("cached_tokens", 0), "ttft": ttft,
                          "density": usage.get("prefill_density")})
            convo += text
    except Exception as e:  # a failed turn is reported, not hidden
        errors.append("conversation %d: %s" % (k, e))
    out[k] = turns


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--conversations", type=int, default=64)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--system-words", type=int, default=120)
    ap.add_argument("--user-words", type=int, default=12)
    ap.add_argument("--reply-tokens", type=int, default=16)
    ap.add_argument("--no-cache", action="store_true", help="every request sends cache_prompt: false")
    ap.add_argument("--sparse", type=json.loads, default=None,
                    help="a sparse_prefill object (JSON) every request sends")
    args = ap.parse_args()
    out = [None] * args.conversations
    errors = []
    t0 = time.monotonic()
    th = [threading.Thread(target=conversation, args=(args, k, out, errors))
          for k in range(args.conversations)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    wall = time.monotonic() - t0
    flat = [t for c in out if c for t in c]
    prompt = sum(t["prompt_tokens"] for t in flat)
    cached = sum(t["cached_tokens"] for t in flat)
    ttfts = [t["ttft"] for t in flat]
    dens = [t["density"] for t in flat if t["density"] is not None]
    print(json.dumps({
        "conversations": args.conversations, "turns": args.turns, "completed": len(flat),
        "errors": errors, "wall_s": round(wall, 3),
        "prompt_tokens": prompt, "cached_tokens": cached,
        "hit_rate": round(cached / prompt, 4) if prompt else 0,
        "ttft_p50_ms": round(pct(ttfts, 50) * 1e3, 2), "ttft_p99_ms": round(pct(ttfts, 99) * 1e3, 2),
        "prefill_density_mean": round(sum(dens) / len(dens), 4) if dens else None,
        "texts": [[t["text"] for t in c] if c else None for c in out],
        "cached": [[t["cached_tokens"] for t in c] if c else None for c in out],
    }))


if __name__ == "__main__":
    main()
