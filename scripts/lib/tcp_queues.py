#!/usr/bin/env python3
"""Where a closed loop's requests wait: sampled from /proc/net/tcp (and tcp6).

    tcp_queues.py PORT SECONDS [INTERVAL_MS]

Every INTERVAL_MS (2) for SECONDS, the established connections to or from 127.0.0.1:PORT
(the registry) are read: a generator's socket with bytes to read is an answer waiting for
the generator; a registry's socket with bytes to read is a request waiting for the
registry. Prints the mean of each over the samples and how often each number of answers
was waiting (docs/benchmarks.md, "The hot path", step 49).

    tcp_queues.py --check     a synthetic table, read back
"""
import collections
import sys
import time


def waiting(text, port):
    """(answers waiting at the generator, requests waiting at the registry) in one table."""
    suffix = ":%04X" % port
    answers = requests = 0
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 5 or fields[3] != "01":  # established only
            continue
        if int(fields[4].split(":")[1], 16) == 0:
            continue
        if fields[2].endswith(suffix):
            answers += 1
        elif fields[1].endswith(suffix):
            requests += 1
    return answers, requests


def sample(port, seconds, interval):
    n, answers, requests, spread = 0, 0, 0, collections.Counter()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = r = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    got = waiting(f.read(), port)
            except OSError:
                continue
            a, r = a + got[0], r + got[1]
        n, answers, requests = n + 1, answers + a, requests + r
        spread[a] += 1
        time.sleep(interval)
    n = max(n, 1)
    often = ", ".join(f"{k}: {v / n:.1%}" for k, v in sorted(spread.items())[:6])
    return (f"{n} samples: {answers / n:.2f} answers waiting at the generator, "
            f"{requests / n:.2f} requests waiting at the registry (answers waiting: {often})")


def check():
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt\n"
        # the generator's sockets (remote port 5000 = 0x1388): one with an answer to read
        "   0: 0100007F:A000 0100007F:1388 01 00000000:00000200 00:00000000 00000000\n"
        "   1: 0100007F:A001 0100007F:1388 01 00000000:00000000 00:00000000 00000000\n"
        # the registry's: two with a request to read, one listening (not established)
        "   2: 0100007F:1388 0100007F:A000 01 00000000:0000016C 00:00000000 00000000\n"
        "   3: 0100007F:1388 0100007F:A001 01 00000000:0000016C 00:00000000 00000000\n"
        "   4: 0100007F:1388 00000000:0000 0A 00000000:00000003 00:00000000 00000000\n"
        # another port's traffic
        "   5: 0100007F:A002 0100007F:1389 01 00000000:00000100 00:00000000 00000000\n"
    )
    assert waiting(table, 5000) == (1, 2), waiting(table, 5000)
    assert waiting(table, 5001) == (1, 0)
    print("tcp_queues: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        check()
    else:
        port, seconds = int(sys.argv[1]), float(sys.argv[2])
        interval = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.002
        print(sample(port, seconds, interval))
