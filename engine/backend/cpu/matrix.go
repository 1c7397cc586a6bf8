package cpu

import (
	"errors"
	"fmt"
	"math"

	"rill/engine/quant"
)

// Matrix is a row-major weight matrix in a GGML format: Rows rows of Cols
// elements, each row laid out as Type lays out Cols elements (whole blocks).
// Data may be a read-only view into a memory-mapped file; nothing here writes
// to it.
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Data       []byte
}

// Validate reports whether m can be multiplied: a weight type MatMul supports
// (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_XS), non-negative dimensions, Cols a
// whole number of Type's blocks, and exactly Rows rows of data.
func (m Matrix) Validate() error {
	if !supported(m.Type) {
		return fmt.Errorf("matrix of %s: not a supported weight type", m.Type)
	}
	if m.Rows < 0 || m.Cols < 0 {
		return fmt.Errorf("matrix of %dx%d: negative dimension", m.Rows, m.Cols)
	}
	rb, err := m.Type.RowBytes(m.Cols)
	if err != nil {
		return fmt.Errorf("matrix rows: %w", err)
	}
	if rb > 0 && m.Rows > math.MaxInt/rb {
		return fmt.Errorf("matrix of %dx%d %s: too large", m.Rows, m.Cols, m.Type)
	}
	if want := m.Rows * rb; len(m.Data) != want {
		return fmt.Errorf("matrix of %dx%d %s: %d bytes of data, want %d", m.Rows, m.Cols, m.Type, len(m.Data), want)
	}
	return nil
}

// rowBytes is the size of one row; m must be valid.
func (m Matrix) rowBytes() int {
	return m.Cols / m.Type.BlockElems() * m.Type.BlockBytes()
}

// errShape is wrapped by the errors of checkMatMul.
var errShape = errors.New("matmul shape mismatch")

// checkMatMul validates the operands of MatMul.
func checkMatMul(out []float32, w Matrix, x []float32, n int) error {
	if err := w.Validate(); err != nil {
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
func CheckMatMul(out []float32, w Matrix, x []float32, n int) error {
	return checkMatMul(out, w, x, n)
}
