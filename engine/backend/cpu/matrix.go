package cpu

import (
	"errors"
	"fmt"
	"math"

	"rill/engine/tensor"
)

// checkWeight reports whether MatMul can multiply m: a weight type it
// supports (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4) and a well-formed matrix
// (tensor.Matrix.Validate).
func checkWeight(m tensor.Matrix) error {
	if !supported(m.Type) {
		return fmt.Errorf("matrix of %s: not a supported weight type", m.Type)
	}
	return m.Validate()
}

// errShape is wrapped by the errors of checkMatMul.
var errShape = errors.New("matmul shape mismatch")

// checkMatMul validates the operands of MatMul.
func checkMatMul(out []float32, w tensor.Matrix, x []float32, n int) error {
	if err := checkWeight(w); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%w: n=%d", errShape, n)
	}
	if w.Cols > 0 && n > math.MaxInt/w.Cols || w.Rows > 0 && n > math.MaxInt/w.Rows {
		return fmt.Errorf("%w: n=%d too large", errShape, n)
	}
	if len(x) < n*w.Cols {
		return fmt.Errorf("%w: x has %d values, want %d rows of %d", errShape, len(x), n, w.Cols)
	}
	if len(out) < n*w.Rows {
		return fmt.Errorf("%w: out has %d values, want %d rows of %d", errShape, len(out), n, w.Rows)
	}
	return nil
}

// CheckMatMul reports whether MatMul(out, w, x, n) would be valid, as an
// error instead of MatMul's panic. It allocates only when it fails.
func CheckMatMul(out []float32, w tensor.Matrix, x []float32, n int) error {
	return checkMatMul(out, w, x, n)
}
