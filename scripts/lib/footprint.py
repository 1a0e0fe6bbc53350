#!/usr/bin/env python3
"""The code one more GET runs, from two callgrind runs: how many distinct instructions, and
the 64-byte lines and 4 KiB pages they lie in, by layer (docs/benchmarks.md, "The hot path",
step 39).

    footprint.py [--top N] SHORT.out LONG.out GETS [SHORT2.out LONG2.out GETS2]

SHORT.out and LONG.out are `valgrind --tool=callgrind --dump-instr=yes` outputs of two runs
that differ by GETS requests. An instruction counts when it ran at least once per two GETs
more in the long run (its count's difference over GETS is 0.5 or more): the code a GET
runs, whatever ran once at the start or the end. On cores the registry shares, what one
answer runs is fetched again from beyond the first-level caches, so its lines weigh more
than its instructions (docs/benchmarks.md, steps 15, 38 and 39). SHA-256's software rounds,
which valgrind runs instead of the CPU's SHA extensions, are counted apart. With a second
pair (another build's), prints B's figures minus A's as well; with `--top N`, the N
functions whose code a GET runs takes the most lines, after each build's table.

    footprint.py --check     a synthetic profile, read back
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from callgrind import records  # noqa: E402  (scripts/lib/callgrind.py)
from layers import layer_of  # noqa: E402  (the layers, by name: scripts/lib/layers.py)

SHA = "sha256 (software under valgrind)"


def counts(lines):
    """({instruction address: its own count}, {address: function}) of a callgrind profile
    with `positions: instr line` (a call's inclusive cost, the line after `calls=`, is not
    the caller's own)."""
    own, where = collections.Counter(), {}
    for fn, _, pos, count, calls in records(lines):
        if calls is None:
            own[pos] += count
            where[pos] = fn
    return own, where


def ran_per_get(short, long, gets):
    """The addresses of the instructions one more GET runs, and the long run's functions."""
    (a, _), (b, where) = short, long
    return [pos for pos in b if (b[pos] - a.get(pos, 0)) / gets >= 0.5], where


def per_get(short, long, gets):
    """{layer: (instructions, lines, pages)} of the code a GET runs, and "all" of them but
    SHA-256's software rounds."""
    ran, where = ran_per_get(short, long, gets)
    by_layer = collections.defaultdict(list)
    for pos in ran:
        by_layer[layer_of(where.get(pos) or "?")].append(pos)
    by_layer["all"] = [p for p in ran if layer_of(where.get(p) or "?") != SHA]

    def size(positions):
        return (len(positions), len({p >> 6 for p in positions}), len({p >> 12 for p in positions}))

    return {layer: size(positions) for layer, positions in by_layer.items()}


def functions(short, long, gets, top):
    """The `top` functions by the lines of theirs a GET runs: (lines, instructions, name)."""
    ran, where = ran_per_get(short, long, gets)
    by_fn = collections.defaultdict(list)
    for pos in ran:
        by_fn[where.get(pos) or "?"].append(pos)
    rows = [(len({p >> 6 for p in ps}), len(ps), fn) for fn, ps in by_fn.items()]
    rows.sort(key=lambda r: (-r[0], r[2]))
    return ["%7d lines %6d instructions  %s" % r for r in rows[:top]]


def table(figures):
    out = ["%-34s %12s %7s %6s" % ("layer", "instructions", "lines", "pages")]
    rows = sorted(figures.items(), key=lambda kv: (kv[0] != "all", -kv[1][1]))
    for layer, (ins, lines, pages) in rows:
        kb = lines * 64 / 1024
        out.append("%-34s %12d %7d %6d   (%.1f KiB)" % (layer, ins, lines, pages, kb))
    return out


def difference(a, b):
    out = ["B - A:"]
    for layer in sorted(set(a) | set(b), key=lambda k: (k != "all", k)):
        ia, la, pa = a.get(layer, (0, 0, 0))
        ib, lb, pb = b.get(layer, (0, 0, 0))
        out.append("%-34s %+12d %+7d %+6d" % (layer, ib - ia, lb - la, pb - pa))
    return out


def load(path):
    with open(path) as f:
        return counts(f)


def check():
    # A function `creb::net::f` whose two instructions on one line run once per GET, and on
    # the next line one once per ten GETs and one once per GET; the call's inclusive cost
    # is not its own; `sha2::compress256` once per GET on a page of its own; `tokio::run`
    # once per run. 100 more GETs in the long run.
    def profile(n):
        return [
            "positions: instr line", "events: Ir",
            "fn=(1) creb::net::f", "0x1000 1 %d" % n, "+4 1 %d" % n,
            "+60 2 %d" % (n // 10), "+4 2 %d" % n,
            "cfn=(2) sha2::compress256", "calls=%d 0x3000 0" % n, "+4 1 %d" % (50 * n),
            "fn=(2)", "0x3000 1 %d" % n,
            "fn=(3) tokio::run", "0x5000 1 1",
        ]
    a = per_get(counts(profile(10)), counts(profile(110)), 100)
    assert a["all"] == (3, 2, 1), a
    assert a["client and connection"] == (3, 2, 1), a
    assert a[SHA] == (1, 1, 1), a
    assert "tokio" not in a, a
    b = dict(a)
    b["all"] = (5, 2, 1)
    assert difference(a, b)[1].split() == ["all", "+2", "+0", "+0"], difference(a, b)
    assert table(a)[1].split()[:4] == ["all", "3", "2", "1"], table(a)
    top = functions(counts(profile(10)), counts(profile(110)), 100, 1)
    assert top == ["%7d lines %6d instructions  creb::net::f" % (2, 3)], top
    print("footprint: ok")


def main(argv):
    if argv[1:] == ["--check"]:
        check()
        return
    args, top = argv[1:], 0
    if args[:1] == ["--top"] and len(args) > 1:
        top, args = int(args[1]), args[2:]
    if len(args) not in (3, 6):
        sys.exit(__doc__)
    pairs = [(load(args[i]), load(args[i + 1]), float(args[i + 2])) for i in range(0, len(args), 3)]
    figures = []
    for n, (short, long, gets) in enumerate(pairs):
        if n:
            print("B:")
        figures.append(per_get(short, long, gets))
        print("\n".join(table(figures[-1])))
        if top:
            print("\n".join(functions(short, long, gets, top)))
    if len(figures) == 2:
        print("\n".join(difference(*figures)))


if __name__ == "__main__":
    main(sys.argv)
