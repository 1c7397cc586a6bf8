package upstream

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSSEReader(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 40<<10) // longer than the reader's buffer
	cases := []struct {
		name    string
		in      string
		want    []string
		wantErr error // after the events
	}{
		{"plain", "data: a\n\ndata: b\n\ndata: [DONE]\n\n", []string{"a", "b", "[DONE]"}, io.EOF},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}, io.EOF},
		{"no space after colon", "data:a\n\n", []string{"a"}, io.EOF},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}, io.EOF},
		{"comments, names and ids skipped", ": ping\n\nevent: message\nid: 3\nretry: 10\ndata: a\n\n: ping\n\n", []string{"a"}, io.EOF},
		{"unterminated last event", "data: a\n\ndata: b", []string{"a", "b"}, io.EOF},
		{"unterminated last line with newline", "data: a\n", []string{"a"}, io.EOF},
		{"empty data is an event", "data:\n\n", []string{""}, io.EOF},
		{"long line", "data: " + long + "\n\n", []string{long}, io.EOF},
		{"empty body", "", nil, io.EOF},
	}
	for _, tc := range cases {
		for _, oneByte := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				var r io.Reader = strings.NewReader(tc.in)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				sr := newSSEReader(r)
				var got []string
				var err error
				for {
					var data []byte
					if data, err = sr.next(); err != nil {
						break
					}
					got = append(got, string(data))
				}
				if !reflect.DeepEqual(got, tc.want) || !errors.Is(err, tc.wantErr) {
					t.Errorf("got %q, %v; want %q, %v", trim(got), err, trim(tc.want), tc.wantErr)
				}
			})
		}
	}
}

func TestSSEReaderErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	sr := newSSEReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)))
	if data, err := sr.next(); err != nil || string(data) != "a" {
		t.Fatalf("first event %q, %v", data, err)
	}
	if _, err := sr.next(); !errors.Is(err, boom) {
		t.Errorf("err %v, want the body's error", err)
	}
	huge := newSSEReader(strings.NewReader("data: " + strings.Repeat("x", maxEventBytes+1) + "\n\n"))
	if _, err := huge.next(); !errors.Is(err, errEventTooLarge) {
		t.Errorf("err %v, want errEventTooLarge", err)
	}
}

func trim(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		if len(v) > 20 {
			v = v[:20] + "…"
		}
		out[i] = v
	}
	return out
}
