//go:build !amd64 || purego

package blas

// Without a vector path the Go bodies of vec_go.go do all: the
// dispatchers take nothing.

func vecName() string { return "go" }

func reluVec(x, y []float32) int                                   { return 0 }
func reluGradVec(dy, y, dx []float32) int                          { return 0 }
func addVec(x, y, z []float32) int                                 { return 0 }
func subVec(x, y, z []float32) int                                 { return 0 }
func mulVec(x, y, z []float32) int                                 { return 0 }
func divVec(x, y, z []float32) int                                 { return 0 }
func sigmoidGradVec(dy, y, dx []float32) int                       { return 0 }
func tanhGradVec(dy, y, dx []float32) int                          { return 0 }
func scaleVec(a, b float32, x, y []float32) int                    { return 0 }
func divByVec(s float32, x, y []float32) int                       { return 0 }
func expVec(x, y []float32) int                                    { return 0 }
func sigmoidVec(x, y []float32) int                                { return 0 }
func tanhVec(x, y []float32) int                                   { return 0 }
func sqrtVec(x, y []float32) int                                   { return 0 }
func expSubVec(x []float32, m float32, y []float32) (int, float32) { return 0, 0 }
