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

// The loops of any row width w (w > 0): the row's bytes copied 16 at a
// time, then 4 at a time, and the first and the last byte of the row
// rowAhead rows ahead prefetched (a row of up to 16 values spans at most
// two cache lines).

// func gatherRowsW(dst, src *float32, ids *int32, n, w int)
TEXT ·gatherRowsW(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ids+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ w+32(FP), R10
	SHLQ $2, R10
	XORQ AX, AX
gatherw_loop:
	LEAQ 16(AX), DX
	CMPQ DX, CX
	JGE gatherw_copy
	MOVLQSX (BX)(DX*4), R8
	IMULQ R10, R8
	ADDQ SI, R8
	PREFETCHT0 (R8)
	PREFETCHT0 -4(R8)(R10*1)
gatherw_copy:
	MOVLQSX (BX)(AX*4), R9
	IMULQ R10, R9
	ADDQ SI, R9
	MOVQ R10, R11
gatherw_16:
	CMPQ R11, $16
	JLT gatherw_4
	MOVUPS (R9), X0
	MOVUPS X0, (DI)
	ADDQ $16, R9
	ADDQ $16, DI
	SUBQ $16, R11
	JMP gatherw_16
gatherw_4:
	TESTQ R11, R11
	JEQ gatherw_next
	MOVL (R9), R12
	MOVL R12, (DI)
	ADDQ $4, R9
	ADDQ $4, DI
	SUBQ $4, R11
	JMP gatherw_4
gatherw_next:
	INCQ AX
	CMPQ AX, CX
	JLT gatherw_loop
	RET

// func scatterRowsW(dst, src *float32, ids *int32, n, w int)
TEXT ·scatterRowsW(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ids+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ w+32(FP), R10
	SHLQ $2, R10
	XORQ AX, AX
scatterw_loop:
	LEAQ 16(AX), DX
	CMPQ DX, CX
	JGE scatterw_copy
	MOVLQSX (BX)(DX*4), R8
	IMULQ R10, R8
	ADDQ DI, R8
	PREFETCHT0 (R8)
	PREFETCHT0 -4(R8)(R10*1)
scatterw_copy:
	MOVLQSX (BX)(AX*4), R9
	IMULQ R10, R9
	ADDQ DI, R9
	MOVQ R10, R11
scatterw_16:
	CMPQ R11, $16
	JLT scatterw_4
	MOVUPS (SI), X0
	MOVUPS X0, (R9)
	ADDQ $16, R9
	ADDQ $16, SI
	SUBQ $16, R11
	JMP scatterw_16
scatterw_4:
	TESTQ R11, R11
	JEQ scatterw_next
	MOVL (SI), R12
	MOVL R12, (R9)
	ADDQ $4, R9
	ADDQ $4, SI
	SUBQ $4, R11
	JMP scatterw_4
scatterw_next:
	INCQ AX
	CMPQ AX, CX
	JLT scatterw_loop
	RET

// func Prefetch(p uintptr)
TEXT ·Prefetch(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET
