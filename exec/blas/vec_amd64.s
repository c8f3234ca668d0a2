//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 bodies of vec.go; n is a positive multiple of 16.

// func reluAVX512(x, y *float32, n int)
TEXT ·reluAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VPXORD Z0, Z0, Z0
relu_loop:
	VMAXPS (SI), Z0, Z1
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ relu_loop
	VZEROUPPER
	RET

// func reluGradAVX512(dy, y, dx *float32, n int)
TEXT ·reluGradAVX512(SB), NOSPLIT, $0-32
	MOVQ dy+0(FP), SI
	MOVQ y+8(FP), BX
	MOVQ dx+16(FP), DI
	MOVQ n+24(FP), CX
	VPXORD Z0, Z0, Z0
grad_loop:
	VCMPPS $1, (BX), Z0, K1 // K1 = 0 < y
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ grad_loop
	VZEROUPPER
	RET

// func addAVX512(x, y, z *float32, n int)
TEXT ·addAVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), BX
	MOVQ z+16(FP), DI
	MOVQ n+24(FP), CX
add_loop:
	VMOVUPS (SI), Z1
	VADDPS (BX), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ add_loop
	VZEROUPPER
	RET

// func subAVX512(x, y, z *float32, n int)
TEXT ·subAVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), BX
	MOVQ z+16(FP), DI
	MOVQ n+24(FP), CX
sub_loop:
	VMOVUPS (SI), Z1
	VSUBPS (BX), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ sub_loop
	VZEROUPPER
	RET

// func mulAVX512(x, y, z *float32, n int)
TEXT ·mulAVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), BX
	MOVQ z+16(FP), DI
	MOVQ n+24(FP), CX
mul_loop:
	VMOVUPS (SI), Z1
	VMULPS (BX), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ mul_loop
	VZEROUPPER
	RET

// func scaleAVX512(a, b float32, x, y *float32, n int): y = a*x + b
TEXT ·scaleAVX512(SB), NOSPLIT, $0-32
	VBROADCASTSS a+0(FP), Z2
	VBROADCASTSS b+4(FP), Z3
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
scale_loop:
	VMOVUPS (SI), Z1
	VFMADD213PS Z3, Z2, Z1 // Z1 = Z2*Z1 + Z3
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ scale_loop
	VZEROUPPER
	RET

// func sqrtAVX512(x, y *float32, n int): y = sqrt(x)
TEXT ·sqrtAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
sqrt_loop:
	VSQRTPS (SI), Z1
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ sqrt_loop
	VZEROUPPER
	RET
