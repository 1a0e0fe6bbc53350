"""Reads a callgrind profile counted by instruction (`valgrind --tool=callgrind
--dump-instr=yes`, `positions: instr line`), shared by scripts/lib/call_sites.py and
scripts/lib/footprint.py: names given once by number and then by number alone, positions
given whole (hex), relative to the last (`+N`, `-N`) or as the same (`*`)."""

import re


def records(lines):
    """Each cost line as (function, called function, instruction address, first event's
    count, calls): `calls` is the count of the `calls=` line before it, whose line is then
    the call's inclusive cost at the calling instruction; None for the function's own."""
    names, fn, cfn, pos, pending = {}, None, None, 0, None

    def name(spec):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", spec)
        if not m:
            return spec
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), "?")

    for line in lines:
        line = line.rstrip("\n")
        if line.startswith("fn="):
            fn = name(line[3:].strip())
        elif line.startswith("cfn="):
            cfn = name(line[4:].strip())
        elif line.startswith("calls="):
            pending = int(line.split("=")[1].split()[0])
        elif line and (line[0].isdigit() or line[0] in "+-*"):
            fields = line.split()
            first = fields[0]
            if first.startswith("0x"):
                pos = int(first, 16)
            elif first[0] in "+-":
                pos += int(first)
            elif first != "*":
                pos = int(first)
            count = int(fields[2]) if len(fields) > 2 else 0
            yield fn, cfn, pos, count, pending
            pending = None
