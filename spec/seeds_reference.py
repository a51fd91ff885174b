# The reference for spec/seeds_spec.lua (lua/moonrl/eval/seeds.lua, stats.welch):
# Welch's test and the two-sample t-test's power in mpmath at 30 digits, an
# independent implementation: Student's t from mpmath's regularized incomplete
# beta, the power from the noncentral t's density integrated numerically
# (mpmath.quad), not from the shifted-central-t approximation seeds.lua uses.
#   env -u PYTHONPATH build/venv/bin/python spec/seeds_reference.py
# prints the numbers seeds_spec.lua holds.
import mpmath as mp

mp.mp.dps = 30

def t_cdf(t, df):
    x = df / (df + t * t)
    tail = mp.betainc(df / 2, mp.mpf(1) / 2, 0, x, regularized=True) / 2
    return 1 - tail if t >= 0 else tail

def t_quantile(p, df):
    return mp.findroot(lambda t: t_cdf(t, df) - p, 2)

def welch(a, b):
    a = [mp.mpf(v) for v in a]; b = [mp.mpf(v) for v in b]
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((v - ma) ** 2 for v in a) / (na - 1)
    vb = sum((v - mb) ** 2 for v in b) / (nb - 1)
    sa, sb = va / na, vb / nb
    se = mp.sqrt(sa + sb)
    df = (sa + sb) ** 2 / (sa ** 2 / (na - 1) + sb ** 2 / (nb - 1))
    d = mb - ma
    h = t_quantile(mp.mpf("0.975"), df) * se
    p = 2 * (1 - t_cdf(abs(d) / se, df))
    return d, d - h, d + h, df, p

# the noncentral t's density (Johnson, Kotz and Balakrishnan, as an integral over the chi variable)
def nct_sf(x, df, ncp):
    # P(T > x), T = (Z + ncp) / sqrt(V / df), V ~ chi2(df): integrate over V
    def f(v):
        dens = v ** (df / 2 - 1) * mp.e ** (-v / 2) / (2 ** (df / 2) * mp.gamma(df / 2))
        return dens * (1 - mp.ncdf(x * mp.sqrt(v / df) - ncp))
    return mp.quad(f, [0, df, 4 * df, mp.inf])

def power(n, d):
    df = 2 * n - 2
    tc = t_quantile(mp.mpf("0.975"), df)
    ncp = d * mp.sqrt(mp.mpf(n) / 2)
    # both tails: P(T > tc) + P(T < -tc) = P(T > tc) + 1 - P(T > -tc)
    return nct_sf(tc, df, ncp) + 1 - nct_sf(-tc, df, ncp)

def needed(d):
    n = 2
    while power(n, d) < mp.mpf("0.8"):
        n += 1
    return n

A = [0.912, 0.874, 0.951, 0.889]
B = [0.948, 0.967, 0.931]
for name, (a, b) in {"AB": (A, B), "BA": (B, A), "near": ([1.0, 1.2, 0.9], [1.1, 1.3, 1.0, 1.25, 0.95])}.items():
    print(name, [mp.nstr(v, 15) for v in welch(a, b)])
for d in ["0.5", "0.8", "1", "2", "3"]:
    print("d", d, "needed", needed(mp.mpf(d)), "power at 17", mp.nstr(power(17, mp.mpf(d)), 10))
