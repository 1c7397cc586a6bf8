// Package tensor is the vocabulary that engine/model and its compute
// backends share without depending on each other: weight matrices as views
// of GGML data, the paged key/value cache (its description, its host
// memory layout, and the handle a backend returns for its own memory), and
// the parameters of rotary embedding and attention that backend operations
// take. It computes nothing; engine/model defines the Backend interface
// over these types and engine/backend/* implement it.
package tensor

import (
	"fmt"
	"math"

	"rill/engine/quant"
)

// Matrix is a row-major weight matrix in a GGML format: Rows rows of Cols
// elements, each row laid out as Type lays out Cols elements (whole blocks).
// Data is usually a read-only view into a memory-mapped GGUF file; nothing
// that takes a Matrix writes to it. It is the one weight type of the engine:
// engine/model loads it and backends multiply it as it is.
//
// A GGUF tensor of GGML shape [Cols, Rows] is such a matrix; a linear layer
// y = x·Wᵀ multiplies activations of Cols values into Rows outputs.
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Data       []byte
}

// Validate reports whether m is well formed: non-negative dimensions, Cols a
// whole number of Type's blocks, and exactly Rows rows of data. Whether a
// backend can multiply Type is the backend's question, not this one.
func (m Matrix) Validate() error {
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

// RowBytes is the size of one row in bytes; m must be valid.
func (m Matrix) RowBytes() int {
	return m.Cols / m.Type.BlockElems() * m.Type.BlockBytes()
}

// SliceRows returns rows [lo,hi) of m as a matrix that views the same data:
// how one fused weight (phi3's query-key-value or gate-up matrices) is used
// as several. It panics when the range is outside m, like a slice
// expression.
func (m Matrix) SliceRows(lo, hi int) Matrix {
	if lo < 0 || hi < lo || hi > m.Rows {
		panic(fmt.Sprintf("tensor: rows [%d,%d) of a %d-row matrix", lo, hi, m.Rows))
	}
	rb := m.RowBytes()
	return Matrix{Type: m.Type, Rows: hi - lo, Cols: m.Cols, Data: m.Data[lo*rb : hi*rb : hi*rb]}
}
