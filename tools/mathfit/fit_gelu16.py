#!/usr/bin/env python3
"""Fits the GELU used when the result is a 16-bit float (bf16/f16).

gelu(x) = x·Φ(x). With h(t) = Φ(−t) = 2^Q(t) for t = |x| clamped to [0, T]:
    Φ(x) = h          for x < 0
    Φ(x) = 1 − h      for x ≥ 0
Q is a polynomial fitted to log2 Φ(−t); Horner's last step takes |x| unclamped, so beyond T
Q falls on as a line (h → 0, and |x| = inf gives h = 0: C's NaN for −inf, inf for inf).
Evaluating it costs one clamp, deg fma, one ex2, one add, one select and one multiply. Codegen
(compiler/codegen/math.cpp) takes degree 5 for bf16 (relative error 4.0e-4, a fifth of half a
bf16 ulp: 3.8% of a normal sample's results one bf16 ulp off the correctly rounded value, their
relative error norm 1.668e-3 against 1.667e-3 correctly rounded) and degree 6 for f16 (4.8e-5, a
tenth of half an f16 ulp). Needs numpy and mpmath (dev only).
"""
import numpy as np
import mpmath as mp

mp.mp.dps = 40
T = 6.0

def target(t):
    return float(mp.log(mp.ncdf(-t), 2))

def fit(deg, n=400):
    k = np.arange(n)
    t = (np.cos(np.pi * (k + 0.5) / n)[::-1] + 1) * T / 2
    y = np.array([target(v) for v in t])
    V = np.vander(t, deg + 1, increasing=True)
    c = np.linalg.lstsq(V, y, rcond=None)[0]
    return c.astype(np.float32)

def fma32(a, b, c):
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))

def gelu16(x, c):
    x = np.float32(x)
    t = np.float32(min(abs(x), np.float32(T)))
    q = c[-1]
    for ci in c[-2:0:-1]:
        q = fma32(q, t, ci)
    q = fma32(q, abs(x), c[0])
    h = np.float32(2.0 ** np.float64(q))
    phi = h if x < 0 else np.float32(1) - h
    return np.float32(x * phi)

if __name__ == "__main__":
    xs = np.concatenate([np.linspace(-40, 40, 200001), np.linspace(-1e-3, 1e-3, 2001)])
    ref = np.array([float(v * mp.ncdf(v)) for v in xs])
    for deg in range(4, 9):
        c = fit(deg)
        out = np.array([gelu16(v, c) for v in xs], dtype=np.float64)
        big = np.abs(ref) > 1e-3
        rel = np.max(np.abs(out[big] - ref[big]) / np.abs(ref[big]))
        ab = np.max(np.abs(out - ref))
        print(f"degree {deg}: max rel {rel:.2e} (|gelu| > 1e-3), max abs {ab:.2e}")
        print("  high first:", ", ".join(f"0x{np.float32(v).view(np.uint32):08x}" for v in c[::-1]),
              " =", ", ".join(f"{v:.9g}" for v in c[::-1]))
