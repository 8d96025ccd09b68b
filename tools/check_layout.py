#!/usr/bin/env python3
"""tools/check_layout.py — the rules of the house, checked (docs/ARCHITECTURE.md explains them).

  includes  every #include "dir/file.h" goes where its room may go (RULES below)
  links     (with --objects DIR) no object file uses a symbol defined in a room its own room
            may not reach: an arrow taken without an include (a call by name) fails too
  cycles    no cycle between top-level folders, over the include and link edges
  sizes     no source file (.c .h .cu .cuh) over MAX_LINES lines

Usage: tools/check_layout.py [--only includes|links|cycles|sizes] [--objects BUILD/obj]
                            [--root DIR]  (the tree to check: default, this checkout)
       tools/check_layout.py --table      the arrows as the markdown table ARCHITECTURE.md holds
       tools/check_layout.py --known      files allowed over the size limit until they are split
Prints one line per violation, "file:line: what", and exits 1 when there is any (0 otherwise).
Files: those git knows (tracked, or new and not ignored); the whole tree outside build/ when
this is not a git checkout. tests/e2e/layout_rules.sh runs it in `make test`.
"""
import os
import re
import subprocess
import sys

MAX_LINES = 1000
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")

# The backends' one door into the scheduler: the interface they implement.
ACCEL = ["scheduler/accel.h", "scheduler/accel_impl.h"]
ANY = ["*"]

# room -> (what its files may include: rooms, or single files; what the room is)
# A file belongs to the longest room that is a prefix of its path. A room always reaches itself.
RULES = {
    "proto": ([], "OpenAI schema, errors, SSE, the KV wire format, the shared byte buffer, "
              "UTF-8, small text files read whole (config, keys)"),
    "model": (["proto"], "checkpoints, tokenizer, chat templates, sampling, shared numerics"),
    "sparse": ([], "sparse attention methods' shared parameters and rules"),
    "scheduler": (["proto", "model", "sparse"], "the device interface accel.h, queues, dispatch, simulator"),
    "cpu": (ACCEL + ["proto", "model", "sparse"], "the reference backend"),
    "gpu": (ACCEL + ["proto", "model", "sparse"], "the CUDA backend (a plugin)"),
    "fpga": (ACCEL + ["fpga/xrt", "fpga/kernels", "proto", "model", "sparse"],
             "the U280 backend's host code"),
    "fpga/xrt": ([], "the card contract: XRT C API, emulator extensions, U280 facts"),
    "fpga/kernels": ([], "the card's kernels (HLS-style C)"),
    "fpga/emu": (["fpga/xrt", "fpga/kernels"], "the card emulator (libxrt_emu.so)"),
    "peer": (ACCEL + ["proto", "model"],
             "other daemons over UCX: lent devices, the remote backend, the peer protocol"),
    "devices": (["proto", "model", "sparse", "scheduler", "cpu", "gpu", "fpga", "fpga/xrt",
                 "fpga/kernels", "peer"], "the composition root: every device by name"),
    "daemon": (["proto", "model", "sparse", "scheduler", "devices", "peer"],
               "main, subcommands, HTTP, config, metrics, peers"),
    "tests": (ANY, "unit and end-to-end tests"),
    "tools": (ANY, "model tools, benchmarks' programs, this check"),
    "bench": (ANY, "benchmarks"),
    "san": ([], "sanitizer builds' shims (linked only into make SAN=thread)"),
}

# Link edges a room may take without including the definer: hooks a room declares for the
# platform it runs on. (room, defining room, symbol prefix, why)
PLATFORM_HOOKS = [
    ("fpga/kernels", "fpga/emu", "fpga_k_",
     "the timing hooks of fpga/kernels/kernel.h: the emulator defines them, HLS compiles them out"),
]

# Known files over MAX_LINES, each with the size it may not grow past (a ratchet: the entry goes
# when the file is split; `--known` lists them). Empty is the goal.
OVER_LIMIT = {
}


def room_of(path):
    best = None
    for room in RULES:
        if path == room or path.startswith(room + "/"):
            if best is None or len(room) > len(best):
                best = room
    return best


def top(path):
    return path.split("/", 1)[0]


def allowed(src_room, target_path):
    """Whether a file of src_room may reach target_path (a file or object's source path)."""
    may, _ = RULES[src_room]
    if may == ANY:
        return True
    troom = room_of(target_path)
    if troom == src_room:
        return True
    for entry in may:
        if entry.endswith((".h", ".cuh")):
            # a single header: its own .c/.cu implements it (the link check's view)
            stem = entry.rsplit(".", 1)[0]
            if target_path == entry or target_path.rsplit(".", 1)[0] == stem:
                return True
        elif entry == troom:
            return True
    return False


def list_files(root):
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, text=True, check=True).stdout
        files = [f for f in out.splitlines() if os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in ("build", ".git")]
            for n in names:
                files.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(f for f in files if f.endswith(SOURCE_EXT))


_TOKEN = re.compile(r'/\*.*?(?:\*/|\Z)|//[^\n]*|"(?:\\.|[^"\\\n])*"?', re.S)
_INCLUDE_BEFORE = re.compile(r"#\s*include\s*$")


def strip_comments(text):
    """Comments and string contents blanked, newlines kept (line numbers stay right); the
    string of an #include is kept."""
    def blank(m):
        t = m.group(0)
        if t.startswith("/*"):
            return re.sub(r"[^\n]", " ", t)
        if t.startswith("//"):
            return " " * len(t)
        if _INCLUDE_BEFORE.search(text, text.rfind("\n", 0, m.start()) + 1, m.start()):
            return t
        if len(t) > 1 and t.endswith('"'):
            k = len(t) - 1  # is the last quote escaped? (an odd run of backslashes before it)
            b = 0
            while k - 1 - b > 0 and t[k - 1 - b] == "\\":
                b += 1
            closed = b % 2 == 0
        else:
            closed = False
        return '"' + " " * (len(t) - 1 - closed) + ('"' if closed else "")
    return _TOKEN.sub(blank, text)


INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def includes(root, files):
    """(file, line, target path) for every #include "..." that names a file of the tree."""
    known = set(files)
    edges = []
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = strip_comments(fh.read())
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            local = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            target = inc if inc in known else local if local in known else None
            if target is None and "/" in inc and room_of(inc):
                target = inc  # a room's header that is not there: still an arrow
            if target is None:
                continue  # generated (build/test_list.h) or outside the tree
            edges.append((f, line, target))
    return edges


def check_rooms(files):
    bad = []
    for f in files:
        if room_of(f) is None:
            bad.append("%s:1: no rule for folder %s/ (add it to RULES in tools/check_layout.py "
                       "and to docs/ARCHITECTURE.md)" % (f, top(f)))
    return bad


def check_includes(edges):
    bad = []
    for f, line, target in edges:
        src = room_of(f)
        if src and not allowed(src, target):
            may = RULES[src][0]
            bad.append("%s:%d: includes %s: %s/ may include %s" %
                       (f, line, target, src, ", ".join([src] + may)))
    return bad


_LINES = {}


def first_use(root, src, sym):
    """Line of the first mention of sym in src (1 when not found). Each file is read once."""
    if src not in _LINES:
        try:
            with open(os.path.join(root, src), encoding="utf-8", errors="replace") as fh:
                _LINES[src] = fh.read().splitlines()
        except OSError:
            _LINES[src] = []
    pat = re.compile(r"\b%s\b" % re.escape(sym))
    for i, l in enumerate(_LINES[src], 1):
        if sym in l and pat.search(l):
            return i
    return 1


def link_edges(root, objdir, files):
    """(source, line, defining source, symbol) for every undefined symbol of an object that
    another object of the tree defines."""
    known = set(files)
    objs = {}
    for d, _, names in os.walk(objdir):
        for n in names:
            if not n.endswith(".o"):
                continue
            rel = os.path.relpath(os.path.join(d, n), objdir)[:-2]  # dir/file.c or dir/file.cu
            if rel.endswith(".cu") and rel in known:
                objs[os.path.join(d, n)] = rel
            elif rel + ".c" in known:
                objs[os.path.join(d, n)] = rel + ".c"
            elif rel in known:
                objs[os.path.join(d, n)] = rel
    defined, undefined = {}, {}
    # one nm per batch of objects (-A: each line starts with "object: ")
    paths = sorted(objs)
    lines = []
    for k in range(0, len(paths), 200):
        try:
            lines += subprocess.run(["nm", "-A", "-P"] + paths[k:k + 200], capture_output=True,
                                    text=True).stdout.splitlines()
        except OSError:
            continue
    for l in lines:
        o, _, rest = l.partition(": ")
        src = objs.get(o)
        parts = rest.split()
        if src is None or len(parts) < 2:
            continue
        sym, kind = parts[0], parts[1]
        if kind == "U":
            undefined.setdefault(src, set()).add(sym)
        elif kind in "TDBRGSC":
            defined.setdefault(sym, src)
    edges = []
    for src, syms in sorted(undefined.items()):
        for sym in sorted(syms):
            d = defined.get(sym)
            if d and d != src:
                edges.append((src, first_use(root, src, sym), d, sym))
    return edges


def hook(room, d, sym):
    return any(room == r and room_of(d) == dr and sym.startswith(pre)
               for r, dr, pre, _ in PLATFORM_HOOKS)


def check_links(edges):
    bad = []
    for src, line, d, sym in edges:
        room = room_of(src)
        if room and not allowed(room, d) and not hook(room, d, sym):
            bad.append("%s:%d: uses %s, defined in %s: %s/ may reach %s" %
                       (src, line, sym, d, room, ", ".join([room] + RULES[room][0])))
    return bad


def check_cycles(inc_edges, lnk_edges):
    graph, why = {}, {}
    for f, line, target in inc_edges:
        a, b = top(f), top(target)
        if a != b:
            graph.setdefault(a, set()).add(b)
            why.setdefault((a, b), "%s:%d includes %s" % (f, line, target))
    for src, line, d, sym in lnk_edges:
        if hook(room_of(src), d, sym):
            continue  # a platform hook: the dependency runs the other way
        a, b = top(src), top(d)
        if a != b:
            graph.setdefault(a, set()).add(b)
            why.setdefault((a, b), "%s:%d uses %s of %s" % (src, line, sym, d))
    bad, seen, stack, on = [], set(), [], set()

    def visit(n):
        seen.add(n)
        stack.append(n)
        on.add(n)
        for m in sorted(graph.get(n, ())):
            if m in on:
                cyc = stack[stack.index(m):] + [m]
                steps = ["%s -> %s (%s)" % (cyc[i], cyc[i + 1], why[(cyc[i], cyc[i + 1])])
                         for i in range(len(cyc) - 1)]
                loc = why[(cyc[0], cyc[1])].split(" ", 1)[0]
                bad.append("%s: cycle %s: %s" % (loc, " -> ".join(cyc), "; ".join(steps)))
            elif m not in seen:
                visit(m)
        stack.pop()
        on.discard(n)

    for n in sorted(graph):
        if n not in seen:
            visit(n)
    return bad


def check_sizes(root, files):
    bad = []
    for f in files:
        with open(os.path.join(root, f), "rb") as fh:
            n = fh.read().count(b"\n")
        cap = OVER_LIMIT.get(f)
        if cap is not None and n <= cap:
            continue
        if n > MAX_LINES:
            bad.append("%s:%d: %d lines, over %d: split it (a file holds one thing)" %
                       (f, MAX_LINES + 1, n, cap if cap else MAX_LINES))
    return bad


def table():
    rows = ["| room | holds | may include |", "|---|---|---|"]
    for room, (may, what) in RULES.items():
        reach = "anything" if may == ANY else ", ".join("`%s`" % m for m in [room + "/"] + [
            m if m.endswith(".h") else m + "/" for m in may])
        rows.append("| `%s/` | %s | %s |" % (room, what, reach))
    return "\n".join(rows)


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    only, objdir = None, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--table":
            print(table())
            return 0
        if a == "--known":
            for f, cap in sorted(OVER_LIMIT.items()):
                print("%s: over %d lines, allowed up to %d until it is split" % (f, MAX_LINES, cap))
            return 0
        if a == "--only" and args:
            only = args.pop(0)
        elif a == "--objects" and args:
            objdir = args.pop(0)
        elif a == "--root" and args:
            root = os.path.abspath(args.pop(0))
        else:
            print("usage: tools/check_layout.py [--only CHECK] [--objects DIR] [--root DIR] | "
                  "--table", file=sys.stderr)
            return 2
    files = list_files(root)
    inc = includes(root, files)
    need_links = only in (None, "links", "cycles")
    lnk = link_edges(root, objdir, files) if need_links and objdir and os.path.isdir(objdir) else []
    checks = {
        "includes": lambda: check_rooms(files) + check_includes(inc),
        "links": lambda: check_links(lnk),
        "cycles": lambda: check_cycles(inc, lnk),
        "sizes": lambda: check_sizes(root, files),
    }
    if only and only not in checks:
        print("check_layout: --only takes %s" % "|".join(checks), file=sys.stderr)
        return 2
    bad = []
    for name, fn in checks.items():
        if only in (None, name):
            bad += fn()
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
