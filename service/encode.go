package service

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// This file holds the append-based JSON primitives behind every body rill
// writes. Chunks are encoded per token, so they avoid reflection and reuse
// one buffer; BenchmarkChunkEncode compares them with encoding/json.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does; U+2028 and U+2029 are escaped so that the output is
// also valid JavaScript. HTML characters are not escaped: these bodies are
// never embedded in HTML.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendFloat appends f as encoding/json would: the shortest representation
// that round-trips, in exponent form only for very small or large magnitudes.
// f must be finite (see logprob).
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		n := len(b) - start
		if n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b
}

// logprob maps an engine log-probability to a finite wire value: minus
// infinity and NaN (a token the model rules out) become -9999, as OpenAI
// writes them, and anything above 0 becomes 0.
func logprob(f float64) float64 {
	switch {
	case math.IsNaN(f) || f < -9999:
		return -9999
	case f > 0:
		return 0
	}
	return f
}

// appendByteArray appends the bytes of p as a JSON array of numbers ([72,105]).
func appendByteArray[T string | []byte](b []byte, p T) []byte {
	b = append(b, '[')
	for i := 0; i < len(p); i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(p[i]), 10)
	}
	return append(b, ']')
}

// appendInt appends n in decimal.
func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }

// appendNullableString appends s, or null when s is empty.
func appendNullableString(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendString(b, s)
}
