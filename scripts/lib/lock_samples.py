#!/usr/bin/env python3
"""Samples on atomic updates, by function, from `perf annotate --stdio` of a timer profile.

    lock_samples.py ANNOTATE.txt [FREQ GETS]

A timer sample of an atomic update lands on the instruction after the `lock`-prefixed one
(or after an `xchg`): those samples are summed, by function, from each instruction's share
of its function's samples. With the profile's frequency and the requests it covered, the
sums are also given in microseconds per request (docs/benchmarks.md, "The hot path",
step 19).

    lock_samples.py --check     a synthetic annotation, read back
"""
import collections
import re
import sys

HEADER = re.compile(r"Percent \|\s+Source code & Disassembly of \S+ for \S+ \((\d+) samples")
FUNCTION = re.compile(r"\s*:\s+\d+\s+[0-9a-f]+ <(.*)>:")
INSTRUCTION = re.compile(r"\s*([\d.]+)\s*:\s+[0-9a-f]+:\s+(.*)$")


def lock_samples(lines):
    """(samples on atomic updates by function, all samples annotated)."""
    per, total, samples, function, before = collections.Counter(), 0.0, 0, "?", ""
    for line in lines:
        m = HEADER.search(line)
        if m:
            samples, before = int(m.group(1)), ""
            continue
        m = FUNCTION.match(line)
        if m:
            function = m.group(1)
            continue
        m = INSTRUCTION.match(line)
        if m:
            share = float(m.group(1)) * samples / 100
            total += share
            if before.startswith(("lock", "xchg")):
                per[function] += share
            before = m.group(2).strip()
    return per, total


def report(per, total, us_per_sample=None):
    locked = sum(per.values())
    out = ["%.0f of %.0f samples (%.1f%%) after an atomic update" % (
        locked, total, 100 * locked / total if total else 0)]
    for function, n in per.most_common(30):
        us = "  %6.3f us/GET" % (n * us_per_sample) if us_per_sample else ""
        out.append("%7.1f%s  %s" % (n, us, function))
    return out


def check():
    text = [
        " Percent |\tSource code & Disassembly of creb-rs for cpu-clock:pppH (200 samples, percent: local period)",
        "         : 5      0000000000001000 <put>:",
        "   10.00 :   1000:\tmov    %rax,%rcx",
        "    5.00 :   1003:\tlock or %rbp,0x10(%r12)",
        "   50.00 :   1008:\tmov    %r15,%rax",
        "   35.00 :   100b:\tret",
        " Percent |\tSource code & Disassembly of creb-rs for cpu-clock:pppH (100 samples, percent: local period)",
        "         : 5      0000000000002000 <drop>:",
        "   20.00 :   2000:\tlock decq (%rax)",
        "   80.00 :   2004:\tjne    2010 <drop+0x10>",
    ]
    per, total = lock_samples(text)
    assert total == 300, total
    assert per == {"put": 100, "drop": 80}, per
    out = report(per, total, 0.01)
    assert out[0] == "180 of 300 samples (60.0%) after an atomic update", out
    assert out[1].split() == ["100.0", "1.000", "us/GET", "put"], out
    print("lock_samples: ok")


def main(argv):
    if argv[1:] == ["--check"]:
        check()
        return
    with open(argv[1], errors="replace") as f:
        per, total = lock_samples(f)
    us = 1e6 / float(argv[2]) / float(argv[3]) if len(argv) > 3 else None
    print("\n".join(report(per, total, us)))


if __name__ == "__main__":
    main(sys.argv)
