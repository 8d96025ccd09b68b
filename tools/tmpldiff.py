#!/usr/bin/env python3
"""Differential testing of the chat-template interpreter against the real jinja2.

Mutates templates (the language cases in tests/data/tmpl_cases.json.gz and the real templates in
tests/data/chat_templates/, token by token), optionally mutates the context's values, renders
each with jinja2 in transformers' environment (tests/model/gen_tmpl_cases.py) and with
build/tmplrun, and reports where they disagree: different output, or one failing where the other
does not, or (with --types) different exception types.

    make build/tmplrun && python3 tools/tmpldiff.py [--seed N] [--n COUNT] [--ctx] [--types]

Known, accepted differences: reprs with memory addresses (generators, bound methods, classes),
integers past 64 bits, and the wording of syntax errors.
"""
import argparse, copy, glob, gzip, json, os, random, re, signal, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
import gen_tmpl_cases as G  # noqa: E402  (jinja2 environment as transformers builds it)
from datetime import datetime  # noqa: E402

G.env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)  # as transformers has it

TOKEN = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\{\{-?|-?\}\}|\{%-?|-?%\}|\{#|#\}|"
                   r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d+)?|\s+|==|!=|<=|>=|//|\*\*|.", re.S)
VALUES = [None, 0, 1, -3, 2.5, True, False, "", "str", "Ünï", [], [1, "a"], {},
          {"role": "user", "content": "x"}, [{"role": "tool", "content": None}], {"type": ["a", "b"]}]


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout()


def reference(src, ctx):
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        return {"rendered": G.env.from_string(src).render(**ctx)}
    except (Timeout, RecursionError, MemoryError):
        return None
    except Exception as e:  # noqa: BLE001 (any template error is a result)
        return {"error": f"{type(e).__name__}: {e}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--ctx", action="store_true", help="mutate the context too")
    ap.add_argument("--types", action="store_true", help="report different exception types")
    args = ap.parse_args()
    cases = json.load(gzip.open(os.path.join(ROOT, "tests", "data", "tmpl_cases.json.gz"), "rt", encoding="utf-8"))["cases"]
    base = cases[0]["context"]
    templates = [c["template"] for c in cases]
    templates += [open(f).read() for f in glob.glob(os.path.join(ROOT, "tests", "data", "chat_templates", "*.jinja"))]
    pool = sorted({t for s in templates for t in TOKEN.findall(s) if not t.isspace()})
    rnd = random.Random(args.seed)
    signal.signal(signal.SIGALRM, on_alarm)
    run = subprocess.Popen([os.path.join(ROOT, "build", "tmplrun")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    stats = {"same": 0, "both_error": 0, "differ": 0, "skipped": 0}
    for _ in range(args.n):
        toks = TOKEN.findall(rnd.choice(templates))
        for _ in range(rnd.randint(1, 3)):
            if not toks:
                break
            i, op = rnd.randrange(len(toks)), rnd.random()
            if op < 0.5:
                toks[i] = rnd.choice(pool)
            elif op < 0.7:
                del toks[i]
            elif op < 0.85:
                toks.insert(i, rnd.choice(pool))
            else:
                toks.insert(i, toks[i])
        src = "".join(toks)
        ctx = copy.deepcopy(base)
        if args.ctx:
            for _ in range(rnd.randint(0, 2)):
                k = rnd.choice(list(ctx))
                if rnd.random() < 0.2:
                    del ctx[k]
                else:
                    ctx[k] = copy.deepcopy(rnd.choice(VALUES))
        ref = reference(src, ctx)
        if ref is None:
            stats["skipped"] += 1
            continue
        run.stdin.write(json.dumps({"t": src, "c": ctx}) + "\n")
        run.stdin.flush()
        line = run.stdout.readline()
        if not line:
            print("tmplrun died on:", repr(src))
            return 1
        got = json.loads(line)
        if "rendered" in ref and ref == got:
            stats["same"] += 1
        elif "error" in ref and "error" in got:
            stats["both_error"] += 1
            rt, gt = ref["error"].split(":")[0], got["error"].split(":")[0]
            if args.types and rt != gt and rt != "TemplateError":
                print("TYPE", repr(src)[:300], "\n  jinja2:", ref["error"][:200], "\n  tandem:", got["error"][:200])
        else:
            stats["differ"] += 1
            print("DIFF", repr(src)[:600], "\n  jinja2:", json.dumps(ref)[:300], "\n  tandem:", json.dumps(got)[:300])
    print(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
