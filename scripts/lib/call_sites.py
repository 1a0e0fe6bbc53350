#!/usr/bin/env python3
"""Calls of one function by call site, per GET, from two callgrind runs of a release build.

    call_sites.py BINARY SHORT.out LONG.out GETS [SYMBOL]

SHORT.out and LONG.out are `valgrind --tool=callgrind --dump-instr=yes` outputs of two runs
that differ by GETS requests (docs/benchmarks.md, "The hot path", step 19); SYMBOL is the
called function, `memcpy` unless given (found with `nm`, as valgrind may not name it). For
each call site: its calls and the called function's instructions per GET, the bytes it
moves when the instruction before the call loads them into the size argument (`mov
$N,%edx`, from `objdump -d`), and the calling function.

    call_sites.py --check     a synthetic profile and disassembly, read back
"""
import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from callgrind import records  # noqa: E402  (scripts/lib/callgrind.py)


def calls_to(lines, target, symbol=None):
    """{(call site address, calling function): [calls, inclusive instructions]} of the
    calls to the function at address `target` (as valgrind names a function without a
    symbol of its own) or named `symbol`, in callgrind's format with `positions: instr
    line`."""
    sites = collections.defaultdict(lambda: [0, 0])
    for fn, cfn, pos, count, calls in records(lines):
        if calls is not None and cfn is not None and (cfn == symbol or cfn.endswith("%016x" % target)):
            site = sites[(pos, fn)]
            site[0] += calls
            site[1] += count
    return sites


def sizes(disassembly):
    """{call instruction's address: bytes} where a `mov $N,%edx` comes at most three
    instructions before a call."""
    found, recent = {}, []
    for line in disassembly:
        m = re.match(r"\s+([0-9a-f]+):\s+(.*)$", line)
        if not m:
            continue
        addr, ins = int(m.group(1), 16), m.group(2)
        if ins.startswith("call"):
            for size in reversed(recent):
                if size is not None:
                    found[addr] = size
                    break
            recent = []
            continue
        mov = re.match(r"mov\s+\$0x([0-9a-f]+),%edx", ins)
        recent = (recent + [int(mov.group(1), 16) if mov else None])[-3:]
    return found


def table(short, long, gets, size_of):
    rows = []
    for key in set(short) | set(long):
        calls = (long.get(key, [0, 0])[0] - short.get(key, [0, 0])[0]) / gets
        instructions = (long.get(key, [0, 0])[1] - short.get(key, [0, 0])[1]) / gets
        if abs(calls) >= 0.05:
            rows.append((instructions, calls, size_of.get(key[0]), key))
    rows.sort(key=lambda r: -r[0])
    out = ["instr/GET calls/GET  bytes  site      function"]
    for instructions, calls, size, (site, fn) in rows:
        out.append("%9.1f %9.2f %6s  %-8x  %s" % (instructions, calls, size or "?", site, fn))
    out.append("total: %.1f instructions, %.2f calls per GET" % (
        sum(r[0] for r in rows), sum(r[1] for r in rows)))
    return out


def check():
    # Two runs of a program calling memcpy (0x500) from two sites of `f` and one of `g`
    # (valgrind naming it by its address, then by its name): 100 more GETs in the long run,
    # each two calls from 0x1004 and one from 0x2008.
    def profile(n):
        return [
            "positions: instr line", "events: Ir",
            "fn=(1) f", "0x1000 1 3",
            "cfn=(2) 0x0000000000000500", "calls=%d 0x500 0" % (2 * n), "+4 1 %d" % (40 * n),
            "+4 1 1",
            "cfn=(2)", "calls=1 0x500 0", "+4 1 20",
            "fn=(3) g", "0x2000 1 2",
            "cfn=(4) other", "calls=5 0x900 0", "+4 1 50",
            "cfn=(5) memcpy", "calls=%d 0x500 0" % n, "+4 1 %d" % (30 * n),
        ]
    short = calls_to(profile(10), 0x500, "memcpy")
    long = calls_to(profile(110), 0x500, "memcpy")
    dis = [
        "    1000:\tmov    $0xd8,%edx", "    1002:\tmov    %rax,%rdi", "    1004:\tcall   500",
        "    100c:\tcall   500",
        "    2004:\tmov    $0xb8,%edx", "    2008:\tcall   *0x10(%rip)",
    ]
    size_of = sizes(dis)
    assert size_of == {0x1004: 0xd8, 0x2008: 0xb8}, size_of
    out = table(short, long, 100, size_of)
    assert out[1].split() == ["40.0", "2.00", "216", "1004", "f"], out
    assert out[2].split() == ["30.0", "1.00", "184", "2008", "g"], out
    assert out[-1] == "total: 70.0 instructions, 3.00 calls per GET", out
    print("call_sites: ok")


def main(argv):
    if argv[1:] == ["--check"]:
        check()
        return
    binary, short_path, long_path, gets = argv[1:5]
    symbol = argv[5] if len(argv) > 5 else "memcpy"
    symbols = subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout
    target = next(int(l.split()[0], 16) for l in symbols.splitlines()
                  if l.split()[-1:] == [symbol] and l.split()[1:2] in (["T"], ["t"]))
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    with open(short_path) as s, open(long_path) as l:
        short, long = calls_to(s, target, symbol), calls_to(l, target, symbol)
    print("\n".join(table(short, long, float(gets), sizes(dis))))


if __name__ == "__main__":
    main(sys.argv)
