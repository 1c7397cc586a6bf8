package service

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestAppendString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // the string JSON decoding must give back
		raw  string // exact encoding, when it matters
	}{
		{in: "", want: "", raw: `""`},
		{in: "hello", want: "hello", raw: `"hello"`},
		{in: `say "hi"\`, want: `say "hi"\`, raw: `"say \"hi\"\\"`},
		{in: "a\nb\tc\r", want: "a\nb\tc\r", raw: `"a\nb\tc\r"`},
		{in: "\x00\x1f", want: "\x00\x1f", raw: `"\u0000\u001f"`},
		{in: "héllo 世界 🙂", want: "héllo 世界 🙂", raw: `"héllo 世界 🙂"`},
		{in: "bad \xff byte", want: "bad \ufffd byte", raw: `"bad \ufffd byte"`},
		{in: "cut \xe4\xb8", want: "cut \ufffd\ufffd"},
		{in: "line\u2028sep\u2029", want: "line\u2028sep\u2029", raw: `"line\u2028sep\u2029"`},
		{in: "<b>&</b>", want: "<b>&</b>", raw: `"<b>&</b>"`},
	}
	for _, tt := range tests {
		got := appendString([]byte("x"), tt.in)[1:]
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("appendString(%q) = %s: not JSON: %v", tt.in, got, err)
			continue
		}
		if back != tt.want {
			t.Errorf("appendString(%q) decodes to %q, want %q", tt.in, back, tt.want)
		}
		if tt.raw != "" && string(got) != tt.raw {
			t.Errorf("appendString(%q) = %s, want %s", tt.in, got, tt.raw)
		}
	}
}

func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{0, 1, -1, 0.5, -1.0667550563812256, -2.6683738231658936,
		1e-7, -3.2e-9, 1e21, 123456789, -0.000001, 1e-6, math.SmallestNonzeroFloat64, -9999} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFloat(nil, f); string(got) != string(want) {
			t.Errorf("appendFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

func TestLogprob(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want float64 }{
		{-1.5, -1.5}, {0, 0}, {math.Inf(-1), -9999}, {math.NaN(), -9999}, {-1e6, -9999}, {0.25, 0},
	}
	for _, tt := range tests {
		if got := logprob(tt.in); got != tt.want {
			t.Errorf("logprob(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestAppendByteArray(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
	}{
		{"", "[]"}, {"H", "[72]"}, {"re", "[114,101]"}, {"\xff\x00", "[255,0]"},
	}
	for _, tt := range tests {
		if got := string(appendByteArray(nil, tt.in)); got != tt.want {
			t.Errorf("appendByteArray(%q) = %s, want %s", tt.in, got, tt.want)
		}
		if got := string(appendByteArray(nil, []byte(tt.in))); got != tt.want {
			t.Errorf("appendByteArray([]byte(%q)) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestAPIErrorJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    apiError
		want string
	}{
		{apiError{Message: "bad", Type: typeInvalidRequest, Param: "messages[0].role", Code: "invalid_value"},
			`{"error":{"message":"bad","type":"invalid_request_error","param":"messages[0].role","code":"invalid_value"}}`},
		{apiError{Message: `say "no"`, Type: typeServer},
			`{"error":{"message":"say \"no\"","type":"server_error","param":null,"code":null}}`},
	}
	for _, tt := range tests {
		got := tt.e.appendJSON(nil)
		if string(got) != tt.want {
			t.Errorf("appendJSON = %s, want %s", got, tt.want)
		}
		mustValidate(t, "ErrorResponse", got)
		if !strings.HasPrefix(string(got), `{"error":`) {
			t.Errorf("not an error object: %s", got)
		}
	}
}
