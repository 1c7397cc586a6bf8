package main

import (
	"bytes"
	"strings"
	"testing"

	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// The cheap parts of the script, checked by go test: the judge of error
// shapes and the corruptions of the GGUF case. The cases themselves need a
// running rill and minutes; run them with go run ./scripts/hostile.

func TestErrorShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		ok   bool
	}{
		{`{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`, true},
		{`{"error":{"message":"m","type":"invalid_request_error","param":"n","code":"too_many_choices"}}`, true},
		{`{"error":{"message":"","type":"t","param":null,"code":null}}`, false},
		{`{"error":{"message":"m","type":"t","param":null}}`, false},
		{`{"error":{"message":"m","type":"t","param":null,"code":null,"extra":1}}`, false},
		{`{"error":{"message":"m","type":"t","param":5,"code":null}}`, false},
		{`{"error":{"message":"m","type":"t","param":null,"code":null},"id":"x"}`, false},
		{`{"error":"m"}`, false},
		{`WebSocket protocol violation: missing Sec-WebSocket-Key`, false},
	}
	for _, tt := range tests {
		if err := errorShape([]byte(tt.body)); (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok %v", tt.body, err, tt.ok)
		}
	}
}

// TestCorruptGGUFs: every corruption changes the test model, and those of
// the file's structure are refused by rill's parser itself (the others are
// refused, or served, higher up: by the model's configuration, the
// tokenizer, or not at all, which the case then probes with requests).
func TestCorruptGGUFs(t *testing.T) {
	t.Parallel()
	good, err := testmodel.Bytes(testmodel.Target(quant.F32))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gguf.Parse(good); err != nil {
		t.Fatalf("the test model does not parse: %v", err)
	}
	files, err := corruptGGUFs(10)
	if err != nil {
		t.Fatal(err)
	}
	structural := []string{"empty file", "3 bytes", "header only", "bad magic", "version 99", "version 0",
		"2^62 tensors", "2^62 metadata keys", "key of 2^62 bytes", "value type 99", "2^40 tokens",
		"token array of type 99", "first token of 2^40 bytes", "tensor of 1,000 dimensions",
		"tensor dimension 2^40", "tensor of type 999", "tensor offset beyond the file",
		"tensor offset misaligned", "truncated after the tensor infos", "truncated halfway through the data",
		"one byte short", "two tensors at one offset"}
	byName := map[string][]byte{}
	for _, f := range files {
		if bytes.Equal(f.data, good) {
			t.Errorf("%s: the file is the test model, unchanged", f.name)
		}
		byName[f.name] = f.data
	}
	for _, name := range structural {
		data, ok := byName[name]
		if !ok {
			t.Errorf("no corruption %q", name)
			continue
		}
		if _, err := gguf.Parse(data); err == nil {
			t.Errorf("%s: gguf.Parse accepts it", name)
		}
	}
	random := 0
	for name := range byName {
		if strings.HasPrefix(name, "random flips") {
			random++
		}
	}
	if random != 10 {
		t.Errorf("%d random corruptions, want 10", random)
	}
}
