//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 bodies of vec.go; n is a positive multiple of 16.

// func reluVec(x, y *float32, n int)
TEXT ·reluVec(SB), NOSPLIT, $0-24
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

// func reluGradVec(dy, y, dx *float32, n int)
TEXT ·reluGradVec(SB), NOSPLIT, $0-32
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

// func addVec(x, y, z *float32, n int)
TEXT ·addVec(SB), NOSPLIT, $0-32
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
