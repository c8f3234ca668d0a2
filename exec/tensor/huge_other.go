//go:build !linux

package tensor

import "unsafe"

func adviseHuge(unsafe.Pointer, uintptr) {}
