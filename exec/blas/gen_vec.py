# gen_vec.py writes vec_avx2_amd64.s, the AVX2+FMA bodies of the
# element-wise kernels of vec.go (run: python3 gen_vec.py).
#
# Each body handles n values, n a positive multiple of 8 (ExpSub's: 16):
# four vectors (32 values) a trip while 32 remain, then one vector a trip.
# The operation on one vector is written once per kernel below; the loop
# around it is the same for all.

ONE = "0x3f800000"  # 1.0


def body(name, args, frame, setup, unit, ptrs, temps_per_lane, doc):
    """A kernel: args are (go name, offset, register) of the pointer and
    count arguments loaded first; setup lines run once; unit(j, off, t)
    gives the lines of one vector at byte offset off with lane j's temps t;
    ptrs are the registers advanced every vector."""
    L = [f"// {doc}", f"TEXT ·{name}(SB), NOSPLIT, $0-{frame}"]
    for arg, off, reg in args:
        L.append(f"\tMOVQ {arg}+{off}(FP), {reg}")
    L += setup
    lane = lambda j: [f"Y{8 + temps_per_lane * j + i}" for i in range(temps_per_lane)]
    L.append("\tCMPQ CX, $32")
    L.append(f"\tJLT {name}_one")
    L.append(f"{name}_four:")
    for j in range(4):
        L += unit(j, 32 * j, lane(j))
    L += [f"\tADDQ $128, {p}" for p in ptrs]
    L += ["\tSUBQ $32, CX", "\tCMPQ CX, $32", f"\tJGE {name}_four", "\tTESTQ CX, CX", f"\tJZ {name}_done"]
    L.append(f"{name}_one:")
    L += unit(0, 0, lane(0))
    L += [f"\tADDQ $32, {p}" for p in ptrs]
    L += ["\tSUBQ $8, CX", f"\tJNZ {name}_one", f"{name}_done:", "\tVZEROUPPER", "\tRET", ""]
    return L


def ind(off, reg):
    return f"{off}({reg})" if off else f"({reg})"


out = []
# y = x unless x < 0: VMAXPS returns its second source (x) when x is NaN
# and when both are zeros, so NaN and -0 pass through, as in vec_amd64.s.
out += body("reluAVX2", [("x", 0, "SI"), ("y", 8, "DI"), ("n", 16, "CX")], 24,
            ["\tVXORPS Y0, Y0, Y0"],
            lambda j, o, t: [f"\tVMAXPS {ind(o, 'SI')}, Y0, {t[0]}", f"\tVMOVUPS {t[0]}, {ind(o, 'DI')}"],
            ["SI", "DI"], 1, "func reluAVX2(x, y *float32, n int): y = max(x, 0), x where x is NaN or -0")
# dx = dy where 0 < y (false for NaN), else +0.
out += body("reluGradAVX2", [("dy", 0, "SI"), ("y", 8, "BX"), ("dx", 16, "DI"), ("n", 24, "CX")], 32,
            ["\tVXORPS Y0, Y0, Y0"],
            lambda j, o, t: [f"\tVCMPPS $1, {ind(o, 'BX')}, Y0, {t[0]} // 0 < y", f"\tVANDPS {ind(o, 'SI')}, {t[0]}, {t[0]}",
                             f"\tVMOVUPS {t[0]}, {ind(o, 'DI')}"],
            ["SI", "BX", "DI"], 1, "func reluGradAVX2(dy, y, dx *float32, n int): dx = dy where 0 < y, else 0")
for op, ins in [("add", "VADDPS"), ("sub", "VSUBPS"), ("mul", "VMULPS"), ("div", "VDIVPS")]:
    sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[op]
    out += body(f"{op}AVX2", [("x", 0, "SI"), ("y", 8, "BX"), ("z", 16, "DI"), ("n", 24, "CX")], 32, [],
                lambda j, o, t, ins=ins: [f"\tVMOVUPS {ind(o, 'SI')}, {t[0]}", f"\t{ins} {ind(o, 'BX')}, {t[0]}, {t[0]}",
                                          f"\tVMOVUPS {t[0]}, {ind(o, 'DI')}"],
                ["SI", "BX", "DI"], 1, f"func {op}AVX2(x, y, z *float32, n int): z = x {sym} y")
out += body("scaleAVX2", [("x", 8, "SI"), ("y", 16, "DI"), ("n", 24, "CX")], 32,
            ["\tVBROADCASTSS a+0(FP), Y0", "\tVBROADCASTSS b+4(FP), Y1"],
            lambda j, o, t: [f"\tVMOVUPS {ind(o, 'SI')}, {t[0]}", f"\tVFMADD213PS Y1, Y0, {t[0]} // a*x + b, rounded once",
                             f"\tVMOVUPS {t[0]}, {ind(o, 'DI')}"],
            ["SI", "DI"], 1, "func scaleAVX2(a, b float32, x, y *float32, n int): y = a*x + b")
out += body("divByAVX2", [("x", 8, "SI"), ("y", 16, "DI"), ("n", 24, "CX")], 32,
            ["\tVBROADCASTSS s+0(FP), Y0"],
            lambda j, o, t: [f"\tVMOVUPS {ind(o, 'SI')}, {t[0]}", f"\tVDIVPS Y0, {t[0]}, {t[0]}",
                             f"\tVMOVUPS {t[0]}, {ind(o, 'DI')}"],
            ["SI", "DI"], 1, "func divByAVX2(s float32, x, y *float32, n int): y = x / s")
out += body("sqrtAVX2", [("x", 0, "SI"), ("y", 8, "DI"), ("n", 16, "CX")], 24, [],
            lambda j, o, t: [f"\tVSQRTPS {ind(o, 'SI')}, {t[0]}", f"\tVMOVUPS {t[0]}, {ind(o, 'DI')}"],
            ["SI", "DI"], 1, "func sqrtAVX2(x, y *float32, n int): y = sqrt(x), correctly rounded")
# The gradients round every product and difference as the Go body does
# (no fused multiply-add), so that every path gives the same bits.
one = [f"\tMOVL ${ONE}, AX", "\tVMOVD AX, X0", "\tVBROADCASTSS X0, Y0"]
out += body("sigmoidGradAVX2", [("dy", 0, "SI"), ("y", 8, "BX"), ("dx", 16, "DI"), ("n", 24, "CX")], 32, one,
            lambda j, o, t: [f"\tVMOVUPS {ind(o, 'BX')}, {t[0]}", f"\tVSUBPS {t[0]}, Y0, {t[1]} // 1 - y",
                             f"\tVMULPS {ind(o, 'SI')}, {t[0]}, {t[0]} // dy y", f"\tVMULPS {t[1]}, {t[0]}, {t[0]}",
                             f"\tVMOVUPS {t[0]}, {ind(o, 'DI')}"],
            ["SI", "BX", "DI"], 2, "func sigmoidGradAVX2(dy, y, dx *float32, n int): dx = dy y (1 - y)")
out += body("tanhGradAVX2", [("dy", 0, "SI"), ("y", 8, "BX"), ("dx", 16, "DI"), ("n", 24, "CX")], 32, one,
            lambda j, o, t: [f"\tVMOVUPS {ind(o, 'BX')}, {t[0]}", f"\tVMULPS {t[0]}, {t[0]}, {t[0]} // y²",
                             f"\tVSUBPS {t[0]}, Y0, {t[0]} // 1 - y²", f"\tVMULPS {ind(o, 'SI')}, {t[0]}, {t[0]}",
                             f"\tVMOVUPS {t[0]}, {ind(o, 'DI')}"],
            ["SI", "BX", "DI"], 1, "func tanhGradAVX2(dy, y, dx *float32, n int): dx = dy (1 - y²)")


# exp on 8 lanes, Cephes' expf as in exp_amd64.s: v = min(max(v, lo), 89)
# (NaN stays NaN: VMAXPS and VMINPS return their second source, v, when
# it is NaN); k = round(v log2e); r = v - k ln2 (in two parts); exp(r) =
# 1 + r + r² p(r); times 2^k as 2^(k>>1) times 2^(k - k>>1), two normal
# powers for every k of v in [-104, 89], so that the last product alone
# rounds (to a subnormal or 0 at the bottom, to +Inf at the top). Uses
# the constant registers C (lo, hi, log2e, ln2hi, ln2lo, one, bias) and
# the temps k, r, p, t; the result is left in p.
COEF = ["0x39506967", "0x3ab743ce", "0x3c088908", "0x3d2aa9c1", "0x3e2aaaaa", "0x3f000000"]


def exp8(v, k, r, p, t, C):
    return [
        f"\tVMAXPS {v}, {C['lo']}, {v}",
        f"\tVMINPS {v}, {C['hi']}, {v}",
        f"\tVMULPS {C['log2e']}, {v}, {k}",
        f"\tVROUNDPS $0, {k}, {k} // k, to nearest",
        f"\tVMOVAPS {v}, {r}",
        f"\tVFNMADD231PS {C['ln2hi']}, {k}, {r} // r = v - k ln2hi",
        f"\tVFNMADD231PS {C['ln2lo']}, {k}, {r} // r -= k ln2lo",
        f"\tVMOVUPS expCoef<>+0(SB), {p}",
    ] + [f"\tVFMADD213PS expCoef<>+{32 * i}(SB), {r}, {p} // p = p r + c" for i in range(1, 6)] + [
        f"\tVMULPS {r}, {r}, {t} // r²",
        f"\tVFMADD213PS {r}, {t}, {p} // p r² + r",
        f"\tVADDPS {C['one']}, {p}, {p} // + 1",
        f"\tVCVTPS2DQ {k}, {k} // k, exactly",
        f"\tVPSRAD $1, {k}, {t} // k1 = k >> 1",
        f"\tVPSUBD {t}, {k}, {k} // k2 = k - k1",
        f"\tVPADDD {C['bias']}, {t}, {t}",
        f"\tVPSLLD $23, {t}, {t} // 2^k1",
        f"\tVMULPS {t}, {p}, {p} // exact",
        f"\tVPADDD {C['bias']}, {k}, {k}",
        f"\tVPSLLD $23, {k}, {k} // 2^k2",
        f"\tVMULPS {k}, {p}, {p} // rounds once",
    ]


def bcast(val, reg, comment, integer=False):
    x = "X" + reg[1:]
    return [f"\tMOVL ${val}, AX // {comment}", f"\tVMOVD AX, {x}",
            f"\t{'VPBROADCASTD' if integer else 'VBROADCASTSS'} {x}, {reg}"]


EXPC = {"lo": "Y2", "hi": "Y3", "log2e": "Y4", "ln2hi": "Y5", "ln2lo": "Y6", "one": "Y7", "bias": "Y15"}


def expconsts(lo, locomment):
    return (bcast(lo, "Y2", locomment) + bcast("0x42b20000", "Y3", "89") + bcast("0x3fb8aa3b", "Y4", "log2(e)")
            + bcast("0x3f318000", "Y5", "ln2, high part") + bcast("0xb95e8083", "Y6", "ln2, low part (negative)")
            + bcast(ONE, "Y7", "1") + bcast("127", "Y15", "the exponent bias", True))


def loop8(name, args, frame, setup, unit, ptrs, doc):
    """A kernel of one vector a trip (the exp kernels: their temps fill
    the registers)."""
    L = [f"// {doc}", f"TEXT ·{name}(SB), NOSPLIT, $0-{frame}"]
    for arg, off, reg in args:
        L.append(f"\tMOVQ {arg}+{off}(FP), {reg}")
    L += setup
    L.append(f"{name}_loop:")
    L += unit
    L += [f"\tADDQ $32, {p}" for p in ptrs]
    L += ["\tSUBQ $8, CX", f"\tJNZ {name}_loop", "\tVZEROUPPER", "\tRET", ""]
    return L


out += [f"DATA expCoef<>+{32 * i + 4 * j}(SB)/4, ${c}" for i, c in enumerate(COEF) for j in range(8)]
out += ["GLOBL expCoef<>(SB), RODATA|NOPTR, $192", ""]

# ExpSub: sixteen values a trip, the sum in two registers of 8 lanes (Y0
# the first 8 of every 16 values, Y1 the last 8), reduced as exp_amd64.s
# reduces its one register of 16: the AVX-512 body's values and sum.
ex = ["\tVBROADCASTSS m+8(FP), Y14"] + expconsts("0xc2aeac4f", "-87.33654") + ["\tVXORPS Y0, Y0, Y0", "\tVXORPS Y1, Y1, Y1"]
unit = []
for off, acc in [(0, "Y0"), (32, "Y1")]:
    unit += [f"\tVMOVUPS {ind(off, 'SI')}, Y8", "\tVSUBPS Y14, Y8, Y8 // v = x - m"]
    unit += exp8("Y8", "Y9", "Y10", "Y11", "Y12", EXPC)
    unit += [f"\tVMOVUPS Y11, {ind(off, 'DI')}", f"\tVADDPS Y11, {acc}, {acc}"]
out += ["// func expSubAVX2(x *float32, m float32, y *float32, n int) float32",
        "// y = exp(x - m), n a positive multiple of 16, and the sum; v = x - m",
        "// below -87.33654 counts as -87.33654, as in exp_amd64.s.",
        "TEXT ·expSubAVX2(SB), NOSPLIT, $0-36", "\tMOVQ x+0(FP), SI", "\tMOVQ y+16(FP), DI", "\tMOVQ n+24(FP), CX"]
out += ex + ["expSubAVX2_loop:"] + unit + ["\tADDQ $64, SI", "\tADDQ $64, DI", "\tSUBQ $16, CX", "\tJNZ expSubAVX2_loop",
        "\tVADDPS Y1, Y0, Y0", "\tVEXTRACTF128 $1, Y0, X1", "\tVADDPS X1, X0, X0", "\tVHADDPS X0, X0, X0",
        "\tVHADDPS X0, X0, X0", "\tVZEROUPPER", "\tMOVSS X0, ret+32(FP)", "\tRET", ""]

# exp alone, over float32's whole range.
eunit = ["\tVMOVUPS (SI), Y8"] + exp8("Y8", "Y9", "Y10", "Y11", "Y12", EXPC) + ["\tVMOVUPS Y11, (DI)"]
out += loop8("expAVX2", [("x", 0, "SI"), ("y", 8, "DI"), ("n", 16, "CX")], 24, expconsts("0xc2d00000", "-104"), eunit,
             ["SI", "DI"], "func expAVX2(x, y *float32, n int): y = exp(x)")

# sigmoid: e = exp(-|x|); y = (x < 0 ? e : 1) / (1 + e), the numerator
# picked by x's sign bit (VBLENDVPS), so neither side loses digits.
sig = expconsts("0xc2d00000", "-104") + bcast("0x7fffffff", "Y0", "all but the sign", True)
sunit = ["\tVMOVUPS (SI), Y13", "\tVANDPS Y0, Y13, Y8", "\tVXORPS Y1, Y1, Y1", "\tVSUBPS Y8, Y1, Y8 // v = -|x|"]
sunit += exp8("Y8", "Y9", "Y10", "Y11", "Y12", EXPC)
sunit += ["\tVADDPS Y7, Y11, Y12 // 1 + e", "\tVBLENDVPS Y13, Y11, Y7, Y8 // e where x's sign is set, else 1",
          "\tVDIVPS Y12, Y8, Y8", "\tVMOVUPS Y8, (DI)"]
out += loop8("sigmoidAVX2", [("x", 0, "SI"), ("y", 8, "DI"), ("n", 16, "CX")], 24, sig, sunit, ["SI", "DI"],
             "func sigmoidAVX2(x, y *float32, n int): y = 1 / (1 + exp(-x))")

# tanh: |x| < 0.625 by Cephes' tanhf polynomial, x + x z q(z) with z = x²;
# above, 1 - 2 / (exp(2|x|) + 1) with x's sign; both computed, the one
# that applies kept (VBLENDVPS on the comparison).
TANH = ["0xbbbaf0ea", "0x3ca9134e", "0xbd5c1e2d", "0x3e088393", "0xbeaaaa99"]
out += [f"DATA tanhCoef<>+{32 * i + 4 * j}(SB)/4, ${c}" for i, c in enumerate(TANH) for j in range(8)]
out += ["GLOBL tanhCoef<>(SB), RODATA|NOPTR, $160", ""]
tan = expconsts("0xc2d00000", "-104") + bcast("0x7fffffff", "Y0", "all but the sign", True) + bcast("0x3f200000", "Y1", "0.625")
tunit = ["\tVMOVUPS (SI), Y13", "\tVANDPS Y0, Y13, Y8 // t = |x|", "\tVCMPPS $1, Y1, Y8, Y14 // t < 0.625",
         "\tVADDPS Y8, Y8, Y8 // v = 2t"]
tunit += exp8("Y8", "Y9", "Y10", "Y11", "Y12", EXPC)
tunit += ["\tVADDPS Y7, Y11, Y11 // e + 1", "\tVADDPS Y7, Y7, Y12 // 2", "\tVDIVPS Y11, Y12, Y11 // 2 / (e + 1)",
          "\tVSUBPS Y11, Y7, Y11 // 1 - 2 / (e + 1)", "\tVANDNPS Y13, Y0, Y12 // x's sign", "\tVORPS Y12, Y11, Y11",
          "\tVMULPS Y13, Y13, Y9 // z = x²", "\tVMOVUPS tanhCoef<>+0(SB), Y10"]
tunit += [f"\tVFMADD213PS tanhCoef<>+{32 * i}(SB), Y9, Y10 // q = q z + c" for i in range(1, 5)]
tunit += ["\tVMULPS Y13, Y9, Y9 // x z", "\tVFMADD213PS Y13, Y9, Y10 // x + x z q",
          "\tVBLENDVPS Y14, Y10, Y11, Y11 // the polynomial where t < 0.625", "\tVMOVUPS Y11, (DI)"]
out += loop8("tanhAVX2", [("x", 0, "SI"), ("y", 8, "DI"), ("n", 16, "CX")], 24, tan, tunit, ["SI", "DI"],
             "func tanhAVX2(x, y *float32, n int): y = tanh(x)")

# The FMA peak: 12 independent chains of VFMADD231PS (8 lanes, 2 flops
# each) n times, for BenchmarkFMAPeak: what one core can do at most.
fma = ["// func fmaPeakAVX2(n int): 12 x 8 x 2 flops a trip, n trips", "TEXT ·fmaPeakAVX2(SB), NOSPLIT, $0-8",
       "\tMOVQ n+0(FP), CX"] + [f"\tVXORPS Y{i}, Y{i}, Y{i}" for i in range(14)] + ["fmaPeakAVX2_loop:"]
fma += [f"\tVFMADD231PS Y12, Y13, Y{i}" for i in range(12)]
fma += ["\tDECQ CX", "\tJNZ fmaPeakAVX2_loop", "\tVZEROUPPER", "\tRET", ""]
out += fma

hdr = """// Code generated by gen_vec.py; DO NOT EDIT.

//go:build amd64 && !purego

#include "textflag.h"

// AVX2 bodies of vec.go; n is a positive multiple of 8.

"""
open("vec_avx2_amd64.s", "w").write(hdr + "\n".join(out))
