//go:build amd64 && !purego

#include "textflag.h"

// func expSubAVX512(x *float32, m float32, y *float32, n int) float32
// y[i] = exp(x[i] - m) for n values (a positive multiple of 16), and their
// sum: v = max(x - m, -87.33654); k = round(v log2e); r = v - k ln2 (in
// two parts); exp(r) = 1 + r + r² p(r), p Cephes' expf polynomial; times
// 2^k by VSCALEFPS. A NaN in v stays NaN (the max returns it).
TEXT ·expSubAVX512(SB), NOSPLIT, $0-36
	MOVQ x+0(FP), SI
	VBROADCASTSS m+8(FP), Z1
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	MOVL $0xc2aeac4f, AX // -87.33654
	VPBROADCASTD AX, Z2
	MOVL $0x3fb8aa3b, AX // log2(e)
	VPBROADCASTD AX, Z4
	MOVL $0x3f318000, AX // ln2, high part
	VPBROADCASTD AX, Z7
	MOVL $0xb95e8083, AX // ln2, low part (negative)
	VPBROADCASTD AX, Z8
	MOVL $0x39506967, AX // 1.9875691500e-4
	VPBROADCASTD AX, Z9
	MOVL $0x3ab743ce, AX // 1.3981999507e-3
	VPBROADCASTD AX, Z11
	MOVL $0x3c088908, AX // 8.3334519073e-3
	VPBROADCASTD AX, Z12
	MOVL $0x3d2aa9c1, AX // 4.1665795894e-2
	VPBROADCASTD AX, Z13
	MOVL $0x3e2aaaaa, AX // 1.6666665459e-1
	VPBROADCASTD AX, Z14
	MOVL $0x3f000000, AX // 0.5
	VPBROADCASTD AX, Z15
	MOVL $0x3f800000, AX // 1
	VPBROADCASTD AX, Z17
	VPXORD Z0, Z0, Z0 // the sum
exp_loop:
	VMOVUPS (SI), Z3
	VSUBPS Z1, Z3, Z3        // v = x - m
	VMAXPS Z3, Z2, Z3        // max(lowest, v); v when v is NaN
	VMULPS Z4, Z3, Z5
	VRNDSCALEPS $0, Z5, Z5   // k = round(v log2e), to nearest
	VMOVAPS Z3, Z6
	VFNMADD231PS Z7, Z5, Z6  // r = v - k ln2hi
	VFNMADD231PS Z8, Z5, Z6  // r -= k ln2lo
	VMOVAPS Z9, Z10
	VFMADD213PS Z11, Z6, Z10 // p = p r + c
	VFMADD213PS Z12, Z6, Z10
	VFMADD213PS Z13, Z6, Z10
	VFMADD213PS Z14, Z6, Z10
	VFMADD213PS Z15, Z6, Z10
	VMULPS Z6, Z6, Z16       // r²
	VFMADD213PS Z6, Z16, Z10 // p r² + r
	VADDPS Z17, Z10, Z10     // + 1
	VSCALEFPS Z5, Z10, Z10   // times 2^k
	VMOVUPS Z10, (DI)
	VADDPS Z10, Z0, Z0
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ exp_loop
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+32(FP)
	RET
