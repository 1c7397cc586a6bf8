package service

import (
	"bytes"
	"strings"
	"testing"
)

func TestReasoningSealer(t *testing.T) {
	t.Parallel()
	s := newReasoningSealer(bytes.Repeat([]byte{7}, 32))
	other := newReasoningSealer(bytes.Repeat([]byte{8}, 32))
	for _, text := range []string{"", "The user wants 2+2. That is 4.", "größer — ✓\n\t\"quoted\"", strings.Repeat("think ", 5000)} {
		sealed := s.seal(text)
		if strings.Contains(sealed, "2+2") || !strings.HasPrefix(sealed, sealPrefix) {
			t.Errorf("sealed %.40q is not opaque", sealed)
		}
		if got, ok := s.open(sealed); !ok || got != text {
			t.Errorf("open(seal(%.20q)) = %.20q, %v", text, got, ok)
		}
		if sealed == s.seal(text) {
			t.Errorf("two seals of %.20q are the same", text)
		}
	}
	good := s.seal("The user wants 2+2.")
	flip := func(c byte) byte {
		if c == 'A' {
			return 'B'
		}
		return 'A'
	}
	tampered := []byte(good)
	tampered[len(tampered)/2] = flip(tampered[len(tampered)/2])
	tests := []struct {
		name, content string
	}{
		{"a byte changed", string(tampered)},
		{"cut short", good[:len(good)-4]},
		{"nonce only", sealPrefix + "AAAAAAAAAAAAAAAA"},
		{"not base64", sealPrefix + "!!!"},
		{"no prefix", strings.TrimPrefix(good, sealPrefix)},
		{"OpenAI's", "gAAAAABo3Yx1c2VjcmV0LWZlcm5ldC10b2tlbi1mcm9tLW9wZW5haQ=="},
		{"another key's", other.seal("The user wants 2+2.")},
		{"empty", ""},
	}
	for _, tc := range tests {
		if got, ok := s.open(tc.content); ok {
			t.Errorf("%s: opened as %q", tc.name, got)
		}
	}
}
