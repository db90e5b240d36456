"""The statistics the evidence scripts share: Student-t intervals of a mean and of a slope.

No numpy: CI's python3 has the standard library only, so the t quantiles are a table.
"""
import math

# Two-sided 95 % (upper 97.5 %) quantiles of Student's t, 1 to 30 degrees of freedom, as
# host/src/sweep/stats.rs holds them.
T_975 = [
    12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252,
    2.306004135, 2.262157163, 2.228138852, 2.200985160, 2.178812830, 2.160368656, 2.144786688,
    2.131449546, 2.119905299, 2.109815578, 2.100922040, 2.093024054, 2.085963447, 2.079613845,
    2.073873068, 2.068657610, 2.063898562, 2.059538553, 2.055529439, 2.051830516, 2.048407142,
    2.045229642, 2.042272456,
]
Z_975 = 1.959963984540054


def t975(df):
    """The 97.5 % quantile of Student's t with `df` degrees of freedom: the table up to 30,
    then the Cornish–Fisher expansion in 1/df about the normal quantile (as stats.rs)."""
    if df < 1:
        raise ValueError("Student's t needs at least one degree of freedom")
    if df <= len(T_975):
        return T_975[df - 1]
    z, v = Z_975, float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v * v)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


class Estimate:
    """Mean, sample standard deviation and 95 % Student-t interval of the mean of `values`."""

    def __init__(self, values):
        values = list(values)
        if len(values) < 2:
            raise ValueError(f"an interval needs at least two values, got {len(values)}")
        self.n = len(values)
        self.mean = sum(values) / self.n
        self.std = math.sqrt(sum((x - self.mean) ** 2 for x in values) / (self.n - 1))
        self.half = t975(self.n - 1) * self.std / math.sqrt(self.n)
        self.low, self.high = self.mean - self.half, self.mean + self.half


class Slope:
    """Least-squares line y = a + b·x and the 95 % Student-t interval of b (n − 2 degrees of
    freedom), for the fitted exponent of a power law read on log–log axes."""

    def __init__(self, xs, ys):
        xs, ys = list(xs), list(ys)
        n = len(xs)
        if n != len(ys) or n < 3:
            raise ValueError(f"a slope's interval needs at least three (x, y) pairs, got {n}")
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        if sxx == 0:
            raise ValueError("a slope needs at least two distinct x")
        self.slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        self.intercept = my - self.slope * mx
        residual = sum((y - self.intercept - self.slope * x) ** 2 for x, y in zip(xs, ys))
        self.half = t975(n - 2) * math.sqrt(residual / (n - 2) / sxx)
        self.low, self.high = self.slope - self.half, self.slope + self.half
        self.n = n


def compare(a, b, below, above):
    """The file's rule on two intervals (anything with `low` and `high`): `below` where `a` lies
    wholly under `b`, `above` where wholly over it, else "overlap"."""
    if a.high < b.low:
        return below
    if a.low > b.high:
        return above
    return "overlap"
