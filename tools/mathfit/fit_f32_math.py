#!/usr/bin/env python3
"""Fit and verify float32 exp / erf / tanh recipes built from fma, mul, add,
abs, copysign, select, div, rint and ex2 (PTX ex2.approx.f32).

Everything is derived here: reference values come from mpmath (40 digits),
fits are weighted minimax (Lawson IRLS on Chebyshev nodes), coefficients
are rounded to float32 one at a time with re-fit of the remaining ones, and
the result is verified in emulated float32 (numpy float32 ops, exactly
emulated fma, ex2 = 2^y rounded to float32 then moved by k ulps, k in
{-2,0,+2}).

Usage: python3 tools/mathfit/fit_f32_math.py [--quick]  (writes coeffs.json and coeffs.h next to it;
the constants are in compiler/codegen/math.cpp). Needs numpy and mpmath (dev only).
"""
import sys, os, json, math, time
import numpy as np
import mpmath as mp


# ===================== float32 emulation (numpy) =====================
# float32 ops are IEEE round-to-nearest-even per op; fma is emulated exactly:
# the product of two float32 is exact in float64, the sum is formed in float64
# with round-to-odd (TwoSum + sticky fix-up) and then rounded once to float32.
class E:
    pass



F32 = np.float32
F64 = np.float64


def f32(x):
    return np.asarray(x, dtype=F64).astype(F32)


def fma(a, b, c):
    a = np.asarray(a, F32).astype(F64)
    b = np.asarray(b, F32).astype(F64)
    c = np.asarray(c, F32).astype(F64)
    p = a * b                      # exact
    with np.errstate(invalid='ignore', over='ignore'):
        s = p + c
        bb = s - p
        e = (p - (s - bb)) + (c - bb)  # exact error of s (TwoSum)
    s = np.array(s, dtype=F64, copy=True)
    bits = s.view(np.int64)
    fix = (e != 0) & np.isfinite(e) & ((bits & 1) == 0)
    if np.any(fix):
        s[fix] = np.nextafter(s[fix], np.where(e[fix] > 0, np.inf, -np.inf))
    with np.errstate(over='ignore'):
        return s.astype(F32)


def perturb_ulps(v, k):
    """move float32 v by k ulps (away from zero for k>0) -- only finite nonzero"""
    if k == 0:
        return v
    v = np.asarray(v, F32).copy()
    ok = np.isfinite(v) & (v != 0)
    bits = v.view(np.int32)
    bits[ok] = bits[ok] + np.int32(k)
    return v


def ex2(y, k=0):
    """model of PTX ex2.approx.f32: exact 2^y rounded to float32, then moved by
    k ulps (|k|<=2 in the analysis)."""
    y = np.asarray(y, F32)
    with np.errstate(over='ignore', under='ignore'):
        r = np.exp2(y.astype(F64)).astype(F32)
    return perturb_ulps(r, k)


def ulp_f32(ref64):
    """ulp of float32 at the (float64) reference value (ulp of the binade of
    |ref| rounded to float32), subnormal ulp 2^-149"""
    a = np.abs(np.asarray(ref64, F64))
    m, e = np.frexp(a)            # a = m*2^e, m in [0.5,1)
    u = np.ldexp(1.0, e - 24)
    return np.maximum(u, 2.0 ** -149)


def all_f32_in(lo, hi, step=1):
    """all positive float32 in [lo,hi] (lo>0), every `step`-th"""
    a = np.array([lo], F32).view(np.int32)[0]
    b = np.array([hi], F32).view(np.int32)[0]
    return np.arange(a, b + 1, step, dtype=np.int32).view(F32)

for _n in ('f32','fma','perturb_ulps','ex2','ulp_f32','all_f32_in'):
    setattr(E, _n, staticmethod(globals()[_n]))

# ===================== fitting (Lawson IRLS minimax) =====================




def cheb_nodes(a, b, n):
    k = np.arange(n)
    x = np.cos(np.pi * (k + 0.5) / n)[::-1]
    return 0.5 * (a + b) + 0.5 * (b - a) * x


def mp_table(fun, xs):
    """fun: mpmath function of mpf -> mpf, returns float64 array"""
    return np.array([float(fun(mp.mpf(float(x)))) for x in xs])


def lawson(B, f, w, iters=3000, fixed=None):
    """min_c max_i |w_i (f_i - B_i.c)|.  B: (N,n) basis matrix (float64).
    fixed: dict {k: value} of coefficients held fixed."""
    N, n = B.shape
    fixed = fixed or {}
    free = [k for k in range(n) if k not in fixed]
    g = f.copy()
    for k, v in fixed.items():
        g = g - B[:, k] * v
    Bf = B[:, free]
    scale = np.max(np.abs(Bf), axis=0)
    Bs = Bf / scale
    u = np.full(N, 1.0 / N)
    best = (np.inf, None)
    for it in range(iters):
        sw = np.sqrt(u) * w
        cf, *_ = np.linalg.lstsq(Bs * sw[:, None], g * sw, rcond=None)
        e = w * (g - Bs @ cf)
        m = np.max(np.abs(e))
        if m < best[0]:
            best = (m, cf.copy())
        u = u * np.abs(e)
        s = u.sum()
        if s == 0:
            break
        u = u / s
        u = np.maximum(u, 1e-300)
    cf = best[1] / scale
    c = np.zeros(n)
    for k, v in fixed.items():
        c[k] = v
    c[free] = cf
    return c, best[0]


def round_f32_sequential(B, f, w, order=None, iters=2000):
    """round coefficients to float32 one at a time (in `order`, default low
    degree first), re-fitting the still-free ones after each rounding."""
    n = B.shape[1]
    order = list(range(n)) if order is None else order
    fixed = {}
    c, err = lawson(B, f, w, iters)
    for k in order:
        fixed[k] = float(np.float32(c[k]))
        if len(fixed) < n:
            c, err = lawson(B, f, w, iters, fixed=dict(fixed))
    c = np.array([fixed[k] for k in range(n)])
    e = w * (f - B @ c)
    return c, np.max(np.abs(e))


def hexf(v):
    return '0x%08x' % np.array([v], np.float32).view(np.uint32)[0]


def fmt9(v):
    return '%.9g' % float(np.float32(v))

F32 = np.float32
mp.mp.dps = 40
QUICK = '--quick' in sys.argv
HERE = os.path.dirname(os.path.abspath(__file__))

# --------------------------------------------------------------- constants
LN2 = mp.log(2)
L2E = F32(float(1 / LN2))                      # log2(e) rounded to float32


def split_ln2(bits=15):
    """ln2_hi = ln2 rounded to `bits` significant bits (24-bits trailing zero
    bits), so j*ln2_hi is exact for |j| < 2^(24-bits)."""
    m = mp.floor(LN2 * 2 ** bits + mp.mpf(0.5))
    hi = F32(float(m / 2 ** bits))
    assert mp.mpf(float(hi)) == m / 2 ** bits
    lo = F32(float(LN2 - mp.mpf(float(hi))))
    return hi, lo


LN2_HI, LN2_LO = split_ln2(15)
EXP_OVF = F32(88.72283172607422)   # largest float32 x with exp(x) < FLT_MAX (+ half ulp)
EXP_UNF = F32(-104.0)              # exp(x) < 2^-150 for x < -103.972 -> rounds to 0
ERF_C = 0.9                        # erf branch point
ERF_SAT = 3.92                     # erf(x) rounds to 1.0f for x >= 3.9195
TANH_C = 0.875                     # tanh branch point
TANH_SAT = 9.01                    # tanh(x) rounds to 1.0f for x >= 9.0109


def horner(c_low_first, t):
    """p = c_n; p = fma(p,t,c_{n-1}); ... ; p = fma(p,t,c_0)"""
    c = [F32(v) for v in c_low_first]
    p = np.full(np.shape(t), c[-1], F32)
    for ck in reversed(c[:-1]):
        p = E.fma(p, t, ck)
    return p


# ------------------------------------------------------------------- fits
def fit_exp_poly(n=7, R=0.3466 * 1.01):
    """e^r ~ sum c_k r^k on [-R,R], c0=c1=1 exact, minimax relative."""
    rs = cheb_nodes(-R, R, 1000)
    f = mp_table(mp.exp, rs)
    w = 1 / f
    B = np.vander(rs, n, increasing=True)
    fixed = {0: 1.0, 1: 1.0}
    for k in range(2, n):
        c, err = lawson(B, f, w, 2000, fixed=dict(fixed))
        fixed[k] = float(F32(c[k]))
    c = np.array([fixed[k] for k in range(n)])
    return c, float(np.max(np.abs(w * (f - B @ c))))


def fit_erf_small(c=ERF_C, n=6):
    """erf(x) = x + x*P(x^2): P(t) ~ erf(sqrt t)/sqrt t - 1, relative weight"""
    T = (c * 1.002) ** 2
    ts = cheb_nodes(0, T, 1500)
    g = mp_table(lambda t: mp.erf(mp.sqrt(t)) / mp.sqrt(t) if t > 0 else 2 / mp.sqrt(mp.pi), ts)
    w = 1 / g
    B = np.vander(ts, n, increasing=True)
    return round_f32_sequential(B, g - 1, w)


def fit_erf_large(c=ERF_C, n=7):
    """erfc(a) ~ 2^Q(a) on [c, 3.92], weight = d erf / dQ = erfc*ln2 (abs err of erf)"""
    xs = cheb_nodes(c / 1.002, ERF_SAT + 0.005, 2000)
    q = mp_table(lambda x: mp.log(mp.erfc(x), 2), xs)
    wq = mp_table(lambda x: mp.erfc(x) * mp.log(2), xs)
    B = np.vander(xs, n, increasing=True)
    return round_f32_sequential(B, q, wq)


def fit_tanh_small(c=TANH_C, n=6):
    """tanh(x) = x + x^3*P(x^2), weight = relative error of tanh"""
    def gfun(t):
        if t == 0:
            return mp.mpf(-1) / 3
        x = mp.sqrt(t)
        return (mp.tanh(x) - x) / x ** 3
    T = (c * 1.002) ** 2
    ts = cheb_nodes(0, T, 1500)
    g = mp_table(gfun, ts)
    w = mp_table(lambda t: t ** 1.5 / mp.tanh(mp.sqrt(t)) if t > 0 else 0, ts)
    B = np.vander(ts, n, increasing=True)
    return round_f32_sequential(B, g, w)


# ------------------------------------------------------- float32 recipes
def exp_f32(x, PEXP, method='poly', scale='split', ks=(0, 0, 0)):
    """ks = ulp perturbations of the ex2 calls (ex2(r*log2e), ex2(j1), ex2(j2))"""
    x = np.asarray(x, F32)
    with np.errstate(invalid='ignore', over='ignore'):
        j = np.rint(x * L2E).astype(F32)            # j = rint(x*log2e)
        r = E.fma(-j, LN2_HI, x)                    # exact
        r = E.fma(-j, LN2_LO, r)
        if method == 'poly':
            p = horner(PEXP, r)                     # e^r
        else:
            p = E.ex2(r * L2E, ks[0])               # the one-ex2 variant, for comparison
        if scale == 'split':
            j1 = np.rint(j * F32(0.5)).astype(F32)
            j2 = (j - j1).astype(F32)
            res = (p * E.ex2(j1, ks[1])) * E.ex2(j2, ks[2])
        else:
            res = p * E.ex2(j, ks[1])
    res = np.where(x > EXP_OVF, F32(np.inf), res)
    res = np.where(x < EXP_UNF, F32(0), res)
    return res.astype(F32)


def erf_f32(x, P, Q, ks=(0,)):
    x = np.asarray(x, F32)
    a = np.abs(x)
    with np.errstate(invalid='ignore', over='ignore'):
        t = a * a
        p = horner(P, t)
        rs = E.fma(a, p, a)                         # a + a*P(a^2)
        q = horner(Q, a)
        rl = F32(1) - E.ex2(q, ks[0])               # 1 - 2^Q(a)
    r = np.where(a < F32(ERF_C), rs, rl)
    r = np.where(a >= F32(ERF_SAT), F32(1), r)
    return np.copysign(r, x).astype(F32)


def tanh_f32(x, P, PEXP, ks=(0, 0, 0), how='poly'):
    x = np.asarray(x, F32)
    a = np.abs(x)
    with np.errstate(invalid='ignore', over='ignore'):
        t = a * a
        p = horner(P, t)
        rs = E.fma(a * t, p, a)                     # a + a^3*P(a^2)
        a2 = (a + a).astype(F32)
        if how == 'poly':                           # exp via the exp recipe (single scale: 2a <= 18.02)
            e = exp_f32(a2, PEXP, 'poly', 'single', ks)
        else:                                       # cheap: one ex2
            e = E.ex2(a2 * L2E, ks[0])
        rl = F32(1) - F32(2) / (e + F32(1))
    r = np.where(a < F32(TANH_C), rs, rl)
    r = np.where(a >= F32(TANH_SAT), F32(1), r)
    return np.copysign(r, x).astype(F32)


# ----------------------------------------------------------- references
def ref_erf(x):
    return np.fromiter(map(math.erf, np.asarray(x, np.float64).tolist()), float, len(x))


def errs(r, ref):
    r = r.astype(np.float64)
    ae = np.abs(r - ref)
    with np.errstate(divide='ignore', invalid='ignore'):
        re = np.where(ref != 0, ae / np.abs(ref), np.where(ae == 0, 0, np.inf))
    ul = ae / E.ulp_f32(ref)
    return ae, re, ul


def chunks(xs, n=2_000_000):
    for i in range(0, len(xs), n):
        yield xs[i:i + n]


def sweep(xs, fun, reffun, masks=None):
    """returns dict of max abs/rel/ulp (and argmax) over xs, per mask name"""
    out = {}
    for xc in chunks(xs):
        ref = reffun(xc)
        r = fun(xc)
        ae, re, ul = errs(r, ref)
        ms = {'all': np.ones(len(xc), bool)} if masks is None else {k: m(xc) for k, m in masks.items()}
        for k, m in ms.items():
            if not m.any():
                continue
            d = out.setdefault(k, dict(n=0, abs=0, rel=0, ulp=0, x_rel=None, x_ulp=None, x_abs=None))
            d['n'] += int(m.sum())
            for key, arr in (('abs', ae), ('rel', re), ('ulp', ul)):
                am = np.where(m, arr, -1)
                i = int(np.argmax(am))
                if am[i] > d[key] or d['x_' + key] is None:
                    d[key] = float(am[i]); d['x_' + key] = float(xc[i])
    return out


def pr(name, d):
    for k, v in d.items():
        print('  %-34s %-10s n=%-10d maxabs %.3e (x=%.9g)  maxrel %.3e (x=%.9g)  maxulp %.3f (x=%.9g)' % (
            name, k, v['n'], v['abs'], v['x_abs'], v['rel'], v['x_rel'], v['ulp'], v['x_ulp']))


def coef_table(name, c, var):
    print('  %s  (Horner in %s, highest first)' % (name, var))
    for k in reversed(range(len(c))):
        print('    c%d = %-16s %s' % (k, fmt9(c[k]), hexf(c[k])))


# ------------------------------------------------------------------- main
def main():
    t0 = time.time()
    print('== constants')
    print('  log2e  = %s %s' % (fmt9(L2E), hexf(L2E)))
    print('  ln2_hi = %s %s (exact %r, 15 significant bits, 9 trailing zero bits)' % (fmt9(LN2_HI), hexf(LN2_HI), float(LN2_HI)))
    print('  ln2_lo = %s %s' % (fmt9(LN2_LO), hexf(LN2_LO)))
    print('  ln2 - (hi+lo) = %.3e' % float(LN2 - mp.mpf(float(LN2_HI)) - mp.mpf(float(LN2_LO))))
    # exactness of j*ln2_hi for |j|<=256
    js = np.arange(-256, 257).astype(F32)
    assert np.all((js * LN2_HI).astype(np.float64) == js.astype(np.float64) * float(LN2_HI))

    PEXP, eexp = fit_exp_poly(7)
    PE, ePE = fit_erf_small()
    QE, eQE = fit_erf_large()
    PT, ePT = fit_tanh_small()
    print('== fits (max weighted error after float32 rounding, in units of 2^-24)')
    print('  exp  poly deg6 on [-0.35,0.35] (rel):           %.4f' % (eexp / 2 ** -24))
    print('  erf  small P deg5 in x^2 on [0,0.9] (rel):       %.4f' % (ePE / 2 ** -24))
    print('  erf  large Q deg6 in |x| on [0.9,3.92] (abs erf): %.4f' % (eQE / 2 ** -24))
    print('  tanh small P deg5 in x^2 on [0,0.875] (rel):     %.4f' % (ePT / 2 ** -24))
    coef_table('exp: e^r = P(r)', PEXP, 'r')
    coef_table('erf small: erf(a) = fma(a, P(a*a), a)', PE, 't=a*a')
    coef_table('erf large: erf(a) = 1 - ex2(Q(a))', QE, 'a')
    coef_table('tanh small: tanh(a) = fma(a*t, P(t), a)', PT, 't=a*a')

    co = dict(L2E=float(L2E), LN2_HI=float(LN2_HI), LN2_LO=float(LN2_LO), PEXP=list(map(float, PEXP)),
              ERF_P=list(map(float, PE)), ERF_Q=list(map(float, QE)), TANH_P=list(map(float, PT)),
              ERF_C=ERF_C, ERF_SAT=ERF_SAT, TANH_C=TANH_C, TANH_SAT=TANH_SAT, EXP_OVF=float(EXP_OVF),
              EXP_UNF=float(EXP_UNF))
    json.dump(co, open(os.path.join(HERE, 'coeffs.json'), 'w'), indent=1)
    with open(os.path.join(HERE, 'coeffs.h'), 'w') as f:
        def arr(nm, c):
            f.write('#define %s_N %d\n__device__ __constant__ unsigned %s[%d] = {%s}; /* low degree first */\n' % (
                nm, len(c), nm, len(c), ', '.join(hexf(v) + 'u' for v in c)))
        f.write('#define L2E_BITS %su\n#define LN2_HI_BITS %su\n#define LN2_LO_BITS %su\n' % (hexf(L2E), hexf(LN2_HI), hexf(LN2_LO)))
        arr('PEXP', PEXP); arr('ERF_P', PE); arr('ERF_Q', QE); arr('TANH_P', PT)

    step = 16 if QUICK else 2
    # ---------------------------------------------------------------- exp
    print('== exp sweeps (reference: numpy float64 exp)')
    N = 2_000_001 if QUICK else 20_000_001
    xs = np.unique(np.linspace(-100.0, 88.7228, N).astype(F32))
    xs = np.concatenate([xs, E.all_f32_in(2.0 ** -30, 1.0, 64), -E.all_f32_in(2.0 ** -30, 1.0, 64)])
    refexp = lambda v: np.exp(v.astype(np.float64))
    masks = {'normal out (x>=-87.336)': lambda v: v >= F32(-87.33654),
             'subnormal out (x<-87.336)': lambda v: v < F32(-87.33654)}
    print('  %d sample points in [-100, 88.7228] (+ every 64th float32 with 2^-30<=|x|<=1)' % len(xs))
    for method in ('poly', 'ex2'):
        for ks in ((0, 0, 0), (2, 0, 0), (-2, 0, 0), (2, 2, 2), (-2, -2, -2)):
            if method == 'poly' and ks[0] != 0 and ks[1] == 0:
                continue
            d = sweep(xs, lambda v: exp_f32(v, PEXP, method, 'split', ks), refexp, masks)
            pr('exp %s split ks=%s' % (method, ks), d)
    # subnormal range: compare with correctly rounded float32 result
    xsub = E.all_f32_in(87.0, 104.0, 1 if not QUICK else 8)
    xsub = -xsub
    cr = np.exp(xsub.astype(np.float64)).astype(F32)      # float64 -> float32 (double rounding negligible)
    for ks in ((0, 0, 0), (2, 2, 2), (-2, -2, -2)):
        r = exp_f32(xsub, PEXP, 'poly', 'split', ks)
        diff = np.abs(r.astype(np.float64) - np.exp(xsub.astype(np.float64))) / 2.0 ** -149
        sub = xsub < F32(-87.33654)
        print('  exp poly split ks=%s, x in [-104,-87.34] (%d pts): max |err| = %.3f units of 2^-149, '
              '%d results differ from correctly rounded float32' % (ks, sub.sum(), diff[sub].max(), int((r != cr)[sub].sum())))
    sp = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 88.72283172607422, 88.72283935546875, 89.0, -103.97, -103.98, -104.0,
                   -104.5, -150.0, 1e-45, -1e-45], F32)
    with np.errstate(all='ignore'):
        print('  specials:', ', '.join('exp(%r)=%r [ref %r]' % (float(a), float(b), float(np.float32(np.exp(np.float64(a)))))
                                     for a, b in zip(sp, exp_f32(sp, PEXP))))

    # ---------------------------------------------------------------- erf
    print('== erf sweeps (reference: math.erf in float64)')
    xs = np.concatenate([E.all_f32_in(1e-3, 4.0, step),
                         E.all_f32_in(2.0 ** -126, 1e-3, 64 * step), E.all_f32_in(1e-45, 2.0 ** -126, 4096)])
    print('  %d points: every %d-th float32 in [1e-3,4], every %d-th in [2^-126,1e-3], every 4096th subnormal; '
          'symmetric (copysign), so positive x only' % (len(xs), step, 64 * step))
    masks = {'|x|<2^-126 (subnormal x)': lambda v: v < F32(2.0 ** -126),
             '2^-126<=|x|<1e-3': lambda v: (v >= F32(2.0 ** -126)) & (v < F32(1e-3)), '1e-3<=|x|<0.9': lambda v: (v >= F32(1e-3)) & (v < F32(ERF_C)),
             '0.9<=|x|<3.92': lambda v: (v >= F32(ERF_C)) & (v < F32(ERF_SAT)), '|x|>=3.92': lambda v: v >= F32(ERF_SAT)}
    for k in (0, 2, -2):
        d = sweep(xs, lambda v: erf_f32(v, PE, QE, (k,)), ref_erf, masks)
        pr('erf ex2 k=%+d' % k, d)
    xl = np.array([4.0, 5.0, 10.0, 1e30, np.inf, -np.inf, np.nan, 0.0, -0.0, -0.5, -3.0], F32)
    with np.errstate(all='ignore'):
        print('  specials:', ', '.join('erf(%r)=%r' % (float(a), float(b)) for a, b in zip(xl, erf_f32(xl, PE, QE))))

    # --------------------------------------------------------------- tanh
    print('== tanh sweeps (reference: numpy float64 tanh)')
    xs = np.concatenate([E.all_f32_in(1e-3, 9.5, step), E.all_f32_in(2.0 ** -126, 1e-3, 64 * step),
                         E.all_f32_in(1e-45, 2.0 ** -126, 4096)])
    print('  %d points: every %d-th float32 in [1e-3,9.5], every %d-th in [2^-126,1e-3], every 4096th subnormal' % (
        len(xs), step, 64 * step))
    reft = lambda v: np.tanh(v.astype(np.float64))
    masks = {'|x|<2^-126 (subnormal x)': lambda v: v < F32(2.0 ** -126),
             '2^-126<=|x|<0.875': lambda v: (v >= F32(2.0 ** -126)) & (v < F32(TANH_C)), '0.875<=|x|<9.01': lambda v: (v >= F32(TANH_C)) & (v < F32(TANH_SAT)),
             '|x|>=9.01': lambda v: v >= F32(TANH_SAT)}
    for how in ('poly', 'raw'):
        for ks in ((0, 0, 0), (2, 2, 0), (-2, -2, 0)):
            d = sweep(xs, lambda v: tanh_f32(v, PT, PEXP, ks, how), reft, masks)
            pr('tanh exp=%s ks=%s' % (how, ks[:2]), d)
    with np.errstate(all='ignore'):
        print('  specials:', ', '.join('tanh(%r)=%r' % (float(a), float(b)) for a, b in zip(xl, tanh_f32(xl, PT, PEXP))))
    print('done in %.0f s' % (time.time() - t0))


if __name__ == '__main__':
    main()
