"""The median of a benchmark's rounds with a distribution-free confidence interval.

The rounds of a generator on cores shared with the registry spread by 10% and more, so a
set's median moves from set to set; the interval says how far. It is the pair of order
statistics x(k) <= median <= x(n+1-k) (1-based) that covers the population median with
probability at least `level`, from the binomial distribution of how many rounds fall below
it: no assumption about the rounds' distribution beyond their independence.

    import sys; sys.path.insert(0, "scripts/lib"); from median_ci import median_ci, describe
"""

import math
import statistics


def median_ci(values, level=0.95):
    """(median, low, high, coverage): the narrowest pair of order statistics that covers
    the median with probability >= `level`, or the whole range (its coverage below `level`)
    when there are too few rounds."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no rounds")
    k, coverage = 1, 1.0 - 2.0 * _cdf(n, 0)
    for j in range(2, n // 2 + 1):
        c = 1.0 - 2.0 * _cdf(n, j - 1)
        if c < level:
            break
        k, coverage = j, c
    return statistics.median(xs), xs[k - 1], xs[n - k], coverage


def _cdf(n, j):
    """P(B <= j) for B ~ Binomial(n, 1/2); 0 for j < 0."""
    return sum(math.comb(n, i) for i in range(0, j + 1)) * 0.5**n if j >= 0 else 0.0


def describe(values, level=0.95):
    """'0.935 (95% CI 0.901-0.983, 20 rounds)', the coverage stated when it is not reached."""
    med, lo, hi, coverage = median_ci(values, level)
    if coverage >= level:
        return f"{med:.3f} ({level:.0%} CI {lo:.3f}-{hi:.3f}, {len(values)} rounds)"
    return f"{med:.3f} (the range {lo:.3f}-{hi:.3f} covers it at {coverage:.1%}, {len(values)} rounds)"


if __name__ == "__main__":
    # The textbook cases: 20 rounds give x(6)..x(15) at 95.9%; 8 rounds only their range.
    m, lo, hi, c = median_ci(range(1, 21))
    assert (lo, hi) == (6, 15) and abs(c - 0.9586) < 1e-3, (lo, hi, c)
    m, lo, hi, c = median_ci(range(1, 9))
    assert (lo, hi) == (1, 8) and abs(c - 0.9922) < 1e-3, (lo, hi, c)
    m, lo, hi, c = median_ci([3.0])
    assert (m, lo, hi) == (3.0, 3.0, 3.0)
    print("median_ci: ok")
