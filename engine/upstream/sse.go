package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxEventBytes bounds one SSE event; a larger one is a broken upstream,
// not a reason to buffer without end.
const maxEventBytes = 8 << 20

var errEventTooLarge = errors.New("server-sent event larger than 8 MiB")

// sseReader reads the data of Server-Sent Events (the text/event-stream
// format) from an upstream response. It is owned by one goroutine.
type sseReader struct {
	br   *bufio.Reader
	data []byte // the current event's data, reused
	long []byte // a line longer than br's buffer, reused
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 16<<10), data: make([]byte, 0, 1024)}
}

// next returns the data of the next event that has any: its data lines
// joined by "\n". Comments (": ping"), event names, ids and retry fields are
// skipped. The slice is valid until the next call. At the end of the body it
// returns io.EOF, after delivering an event that was not closed by a blank
// line; other errors are the body's.
func (r *sseReader) next() ([]byte, error) {
	r.data = r.data[:0]
	have := false
	for {
		line, err := r.line()
		if err != nil {
			if errors.Is(err, io.EOF) && have {
				return r.data, nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if have {
				return r.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if string(field) != "data" {
			continue
		}
		if have {
			r.data = append(r.data, '\n')
		}
		if len(r.data)+len(value) > maxEventBytes {
			return nil, errEventTooLarge
		}
		r.data = append(r.data, value...)
		have = true
	}
}

// line returns the next line without its end ("\n", "\r\n" or "\r" before
// "\n"). A last line without an end is returned with a nil error; io.EOF
// comes after it.
func (r *sseReader) line() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		r.long = append(r.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(r.long) > maxEventBytes {
				return nil, errEventTooLarge
			}
			line, err = r.br.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}
