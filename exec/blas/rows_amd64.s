//go:build amd64 && !purego

#include "textflag.h"

// Row gathers and scatters of rows.go: SSE moves (amd64's baseline) and a
// prefetch of the table row rowAhead (16) rows ahead. n > 0.

// func gatherRows16(dst, src *float32, ids *int32, n int)
TEXT ·gatherRows16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ids+16(FP), BX
	MOVQ n+24(FP), CX
	XORQ AX, AX
gather_loop:
	LEAQ 16(AX), DX
	CMPQ DX, CX
	JGE gather_copy
	MOVLQSX (BX)(DX*4), R8
	SHLQ $6, R8
	PREFETCHT0 (SI)(R8*1)
gather_copy:
	MOVLQSX (BX)(AX*4), R9
	SHLQ $6, R9
	MOVUPS (SI)(R9*1), X0
	MOVUPS 16(SI)(R9*1), X1
	MOVUPS 32(SI)(R9*1), X2
	MOVUPS 48(SI)(R9*1), X3
	MOVUPS X0, (DI)
	MOVUPS X1, 16(DI)
	MOVUPS X2, 32(DI)
	MOVUPS X3, 48(DI)
	ADDQ $64, DI
	INCQ AX
	CMPQ AX, CX
	JLT gather_loop
	RET

// func scatterRows16(dst, src *float32, ids *int32, n int)
TEXT ·scatterRows16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ids+16(FP), BX
	MOVQ n+24(FP), CX
	XORQ AX, AX
scatter_loop:
	LEAQ 16(AX), DX
	CMPQ DX, CX
	JGE scatter_copy
	MOVLQSX (BX)(DX*4), R8
	SHLQ $6, R8
	PREFETCHT0 (DI)(R8*1)
scatter_copy:
	MOVLQSX (BX)(AX*4), R9
	SHLQ $6, R9
	MOVUPS (SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 32(SI), X2
	MOVUPS 48(SI), X3
	MOVUPS X0, (DI)(R9*1)
	MOVUPS X1, 16(DI)(R9*1)
	MOVUPS X2, 32(DI)(R9*1)
	MOVUPS X3, 48(DI)(R9*1)
	ADDQ $64, SI
	INCQ AX
	CMPQ AX, CX
	JLT scatter_loop
	RET
