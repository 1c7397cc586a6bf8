//go:build !amd64

package sample

// Without amd64 assembly the softmax is the generic Go one.

var useSIMD = false

func maxSIMD(x []float32) float32                  { return maxGeneric(x) }
func expSubSumSIMD(x []float32, m float32) float64 { return expSubSumGeneric(x, m) }
func scaleSIMD(x []float32, a float32)             { scaleGeneric(x, a) }
