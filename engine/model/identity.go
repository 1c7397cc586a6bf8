package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
)

// Fingerprint names the model's weights and hyperparameters without
// reading the whole file: a hash of the GGUF header (its metadata, long
// arrays abbreviated), every tensor's name, shape, type and place, the
// size of the data, and a sample of each tensor's bytes (its first and
// last 64 bytes, and 4 KiB from the middle of a few). Keys and values
// computed by two models of equal fingerprints are interchangeable, so it
// keys what outlives the process (the prompt cache's disk tier); a
// fine-tune of the same shape differs in the sample. It reads a few pages
// per tensor of the mapped file.
func (m *Model) Fingerprint() string {
	f := m.File
	h := sha256.New()
	fmt.Fprintf(h, "gguf v%d align=%d data=%d\n", f.Version, f.Alignment, f.DataOffset)
	for _, k := range f.Metadata.Keys() {
		v, _ := f.Metadata.Value(k)
		fmt.Fprintf(h, "%s=%s\n", k, v)
	}
	var end int64
	for i, ti := range f.Tensors {
		fmt.Fprintf(h, "%s %v %s @%d+%d\n", ti.Name, ti.Shape, ti.Type, ti.Offset, ti.Size)
		end = max(end, ti.Offset+ti.Size)
		t, ok := f.Tensor(ti.Name)
		if !ok {
			continue
		}
		sample(h, t.Data, 0, 64)
		sample(h, t.Data, len(t.Data)-64, 64)
		if i%max(len(f.Tensors)/8, 1) == 0 {
			sample(h, t.Data, len(t.Data)/2, 4096)
		}
	}
	fmt.Fprintf(h, "size=%d\n", f.DataOffset+end)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// sample hashes data[at:at+n], clipped to data.
func sample(h hash.Hash, data []byte, at, n int) {
	at = max(at, 0)
	end := min(at+n, len(data))
	if at >= end {
		return
	}
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(at)))
	h.Write(data[at:end])
}
