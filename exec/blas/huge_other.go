//go:build !linux

package blas

import "unsafe"

// AdviseHuge does nothing here (see huge_linux.go).
func AdviseHuge(unsafe.Pointer, uintptr) {}
