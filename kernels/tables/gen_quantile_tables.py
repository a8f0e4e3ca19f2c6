#!/usr/bin/env python3
"""Generates kernels/quantile_tables.inc: the tables of kernels/quantile.hpp.

    python3 kernels/tables/gen_quantile_tables.py kernels/quantile_tables.inc

Deterministic: every number is computed with mpmath at 160 bits and rounded to fp32 by integer
arithmetic here (no numpy, no libm), so any mpmath gives the same file. About a minute on one core.

Tables (quantile.hpp documents how they are read):
- normal_node16_table[m] = fp32 nearest to Phi^-1((32768 + m + 0.5) / 65536), m = 0..32767.
- normal_cubic_table: one cubic c0 + t (c1 + t (c2 + t c3)) per segment of the folded 64-bit
  position x (q in the tail, d = 2^63 - q in the center), t in [0, 1) across the segment.
  Each cubic is fitted to |z| at high precision: c0 is |z| at the segment's start rounded to
  nearest; c1, c2, c3 minimise the relative error (least squares on Chebyshev points) under the
  constraint c0 + c1 + c2 + c3 = |z| at the segment's end, and are rounded one at a time with the
  later ones refitted. The constraint puts each segment's last value on the right side of the
  next segment's first one, so the function stays monotone across boundaries; the script checks
  every boundary in exact fp32 emulation of the evaluation and nudges c1 where one would step back
  (none needs it today).
"""
import math
import sys
from fractions import Fraction

import mpmath
from mpmath import mp, mpf

mp.prec = 160

SEG_BITS = 4
SEGS = 1 << SEG_BITS
OCTAVES = 62  # octaves 0..61 of x, in the tail (x = q < 2^62) and in the center (x = d < 2^62)
CENTER_ROW0 = 32  # row of center octave 0, segment 0 (rows 0..31: row 0 is p = 2^63, the rest unused)
CENTER_POINT_ROW = CENTER_ROW0 + OCTAVES * SEGS  # 1024: q = 2^62 exactly
TAIL_ROW0 = CENTER_POINT_ROW + 1  # 1025
ROWS = TAIL_ROW0 + OCTAVES * SEGS  # 2017
T_BITS = 23
TWO63 = mpf(2) ** 63
SQRT2 = mp.sqrt(2)


# ---------------------------------------------------------------------------------------------
# fp32 rounding and exact emulation of the device/host evaluation (fmaf, subtraction).

def to_fraction(x):
    """The exact value of an mpf, float, int or Fraction."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, mpmath.mpf):
        man, exp = x.man_exp  # man is |mantissa|
        v = Fraction(man) * (Fraction(2) ** exp)
        return -v if x < 0 else v
    return Fraction(x)


def round_f32(x):
    """x (mpf or Fraction) rounded to the nearest fp32, ties to even; returned as a Python float."""
    x = to_fraction(x)
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    a = abs(x)
    # exponent of the leading bit: 2^e <= a < 2^(e+1)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = max(e - 23, -149)  # quantum: normal numbers keep 24 bits, subnormals stop at 2^-149
    y = a / (Fraction(2) ** q)
    n = y.numerator // y.denominator
    r = y - n
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and n % 2 == 1):
        n += 1
    if n >= (1 << 24) and q + 24 > 127:
        raise OverflowError(x)
    return sign * float(Fraction(n) * (Fraction(2) ** q))


def ulp32(v):
    """Spacing of the fp32 numbers at v (v an fp32 value)."""
    if v == 0:
        return 2.0 ** -149
    m, e = math.frexp(abs(v))  # |v| = m 2^e, m in [0.5, 1)
    return 2.0 ** max(e - 24, -149)


def fma32(a, b, c):
    return round_f32(to_fraction(a) * to_fraction(b) + to_fraction(c))


def eval_row(row, t):
    c0, c1, c2, c3 = row
    return fma32(fma32(fma32(c3, t, c2), t, c1), t, c0)


# ---------------------------------------------------------------------------------------------
# The exact quantile.

def abs_z_tail(x):
    """|Phi^-1(x / 2^64)| for the tail, 0 < x <= 2^62."""
    return SQRT2 * mp.erfinv(1 - mpf(x) / TWO63)


def abs_z_center(x):
    """Phi^-1(1/2 + x / 2^64) for the center, 0 <= x <= 2^62."""
    return SQRT2 * mp.erfinv(mpf(x) / TWO63)


def node16():
    out = []
    for m in range(32768):
        z = SQRT2 * mp.erfinv(mpf(2 * m + 1) / 65536)
        out.append(round_f32(z))
    return out


# ---------------------------------------------------------------------------------------------
# Fitting.

N_NODES = 12
NODES = [(1 - mp.cos(mp.pi * i / (N_NODES - 1))) / 2 for i in range(N_NODES)]  # includes 0 and 1


def lsq(columns, target, weights):
    """Weighted least squares: coefficients a minimising sum_i (w_i (target_i - sum_j a_j col_j[i]))^2."""
    k = len(columns)
    A = mp.matrix(k, k)
    b = mp.matrix(k, 1)
    for r in range(k):
        for c in range(k):
            A[r, c] = mp.fsum(weights[i] ** 2 * columns[r][i] * columns[c][i] for i in range(len(target)))
        b[r] = mp.fsum(weights[i] ** 2 * columns[r][i] * target[i] for i in range(len(target)))
    return list(mp.lu_solve(A, b))


def fit_segment(f_nodes):
    """Cubic with c0 = f(0) rounded and c0 + c1 + c2 + c3 = f(1), rounded coefficient by coefficient."""
    ts = NODES
    w = [1 / f if f != 0 else mpf(1) for f in f_nodes]
    c0 = round_f32(f_nodes[0])
    g = [f - mpf(c0) for f in f_nodes]  # what t (c1 + c2 t + c3 t^2) must give
    G = g[-1]  # = c1 + c2 + c3 (t = 1)
    # c1 = G - c2 - c3: residual g - G t - c2 (t^2 - t) - c3 (t^3 - t)
    r = [g[i] - G * ts[i] for i in range(N_NODES)]
    c2, c3 = lsq([[t * t - t for t in ts], [t ** 3 - t for t in ts]], r, w)
    c1 = round_f32(G - c2 - c3)
    # c3 = G - c1 - c2: residual g - c1 t - (G - c1) t^3 - c2 (t^2 - t^3)
    r = [g[i] - mpf(c1) * ts[i] - (G - mpf(c1)) * ts[i] ** 3 for i in range(N_NODES)]
    (c2,) = lsq([[t * t - t ** 3 for t in ts]], r, w)
    c2 = round_f32(c2)
    c3 = round_f32(G - mpf(c1) - mpf(c2))
    return [c0, c1, c2, c3]


def segment_x(e, s, t):
    """Position x of segment s of octave e at local t: 2^e + (s + t) 2^(e-4)."""
    return mpf(2) ** e + (s + mpf(t)) * mpf(2) ** (e - SEG_BITS)


def row_of(center, e, s):
    return (CENTER_ROW0 if center else TAIL_ROW0) + e * SEGS + s


def reachable(e, s):
    """Whether an integer x has octave e and segment s (octaves below 4 have fewer than 16 values)."""
    return e >= SEG_BITS or s % (1 << (SEG_BITS - e)) == 0


def t_last(e):
    """The largest t an integer x of octave e reaches: 23 bits, or fewer below octave 27."""
    bits = min(T_BITS, e - SEG_BITS)
    return 0.0 if bits <= 0 else 1.0 - 2.0 ** -bits


def cubic_table(log):
    rows = [[0.0, 0.0, 0.0, 0.0] for _ in range(ROWS)]
    rows[CENTER_POINT_ROW] = [round_f32(abs_z_center(mpf(2) ** 62)), 0.0, 0.0, 0.0]
    for center in (True, False):
        z_of = abs_z_center if center else abs_z_tail
        for e in range(OCTAVES):
            for s in range(SEGS):
                f_nodes = [z_of(segment_x(e, s, t)) for t in NODES]
                rows[row_of(center, e, s)] = fit_segment(f_nodes)
            log(f"{'center' if center else 'tail'} octave {e} fitted")
    return rows


# ---------------------------------------------------------------------------------------------
# Monotonicity across segment boundaries. Along p from 1 to 2^63, |z| must not increase: the tail
# rows in increasing x, the point q = 2^62, then the center rows in decreasing x, then 0.

def ordered_runs():
    """(row, t_first, t_last, direction) in increasing p; direction is the sign of d|z|/dt."""
    runs = []
    for e in range(OCTAVES):
        for s in range(SEGS):
            if reachable(e, s):
                runs.append((row_of(False, e, s), 0.0, t_last(e), -1))
    runs.append((CENTER_POINT_ROW, 0.0, 0.0, 0))
    for e in reversed(range(OCTAVES)):
        for s in reversed(range(SEGS)):
            if reachable(e, s):
                runs.append((row_of(True, e, s), 0.0, t_last(e), +1))
    runs.append((0, 0.0, 0.0, 0))
    return runs


def endpoints(rows, run):
    """|z| at the run's first and last position in increasing p."""
    row, t0, t1, direction = run
    a, b = eval_row(rows[row], t0), eval_row(rows[row], t1)
    return (a, b) if direction <= 0 else (b, a)


def enforce_monotone_boundaries(rows, log):
    runs = ordered_runs()
    nudged = 0
    for k in range(len(runs) - 1):
        prev, nxt = runs[k], runs[k + 1]
        for _ in range(64):
            last_prev = endpoints(rows, prev)[1]
            first_next = endpoints(rows, nxt)[0]
            if last_prev >= first_next:
                break
            # A tail run ends (t = t_last) too low: raise that end; a center run starts (in p, at
            # t = t_last) too high: lower it. One ulp of c1 moves the end by about c1 / 2^23, the
            # start (c0) not at all. Other pairs hold by themselves: both values are rounded c0s.
            target, sign = (prev, +1) if prev[3] < 0 else (nxt, -1)
            if target[3] == 0:
                raise RuntimeError(f"boundary {prev} -> {nxt} steps back between two rounded values")
            row = rows[target[0]]
            row[1] = row[1] + sign * ulp32(row[1])
            nudged += 1
        else:
            raise RuntimeError(f"boundary {prev} -> {nxt} still steps back after 64 nudges")
    log(f"{nudged} nudges of c1 keep every segment boundary monotone")
    return nudged


# ---------------------------------------------------------------------------------------------

def hexf(v):
    if v == 0:
        return "0x0p+0f" if str(v)[0] != "-" else "-0x0p+0f"
    h = float(v).hex()  # '0x1.8000000000000p-3'
    mant, exp = h.split("p")
    if "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    return f"{mant}p{exp}f"


def write_inc(path, node, rows):
    with open(path, "w") as out:
        w = out.write
        w("// Generated by kernels/tables/gen_quantile_tables.py: do not edit.\n")
        w("//   python3 kernels/tables/gen_quantile_tables.py kernels/quantile_tables.inc\n")
        w("// The includer defines LAYERINIT_QUANTILE_TABLE (the storage: empty on the host, __device__ on\n")
        w("// the GPU) inside the namespace the tables belong to; kernels/quantile.hpp reads them.\n")
        w("#if !defined(LAYERINIT_QUANTILE_TABLE)\n#error define LAYERINIT_QUANTILE_TABLE before including quantile_tables.inc\n#endif\n\n")
        w(f"LAYERINIT_QUANTILE_TABLE const float normal_node16_table[{len(node)}] = {{\n")
        for i in range(0, len(node), 8):
            w("    " + ", ".join(hexf(v) for v in node[i:i + 8]) + ",\n")
        w("};\n\n")
        w(f"LAYERINIT_QUANTILE_TABLE const CubicRow normal_cubic_table[{len(rows)}] = {{\n")
        for i, r in enumerate(rows):
            note = ""
            if i == 0:
                note = "  // p = 2^63: z = 0 (rows 1..31 unused)"
            elif i == CENTER_POINT_ROW:
                note = "  // q = 2^62: |Phi^-1(1/4)|"
            elif CENTER_ROW0 <= i < CENTER_POINT_ROW and (i - CENTER_ROW0) % SEGS == 0:
                note = f"  // center, d octave {(i - CENTER_ROW0) // SEGS}"
            elif i >= TAIL_ROW0 and (i - TAIL_ROW0) % SEGS == 0:
                note = f"  // tail, q octave {(i - TAIL_ROW0) // SEGS}"
            w("    {" + ", ".join(hexf(v) for v in r) + "}," + note + "\n")
        w("};\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_quantile_tables.py OUTPUT.inc")
    log = lambda s: print(s, file=sys.stderr, flush=True)
    # Self-check of the reference: Phi(z) must give back u, also deep in the tail and at the center.
    for x in (1, 3, 2 ** 31, 2 ** 62 - 1):
        z = abs_z_tail(x)
        assert abs(mp.ncdf(-z) * 2 ** 64 / x - 1) < mpf(10) ** -40, x
        z = abs_z_center(x)
        assert abs((mp.ncdf(z) - mpf(1) / 2) * 2 ** 64 / x - 1) < mpf(10) ** -40, x
    node = node16()
    log("node16 table done")
    rows = cubic_table(log)
    enforce_monotone_boundaries(rows, log)
    write_inc(sys.argv[1], node, rows)


if __name__ == "__main__":
    main()
