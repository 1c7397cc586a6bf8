package service

import (
	"net/http"
)

// sseWriter frames chunks as Server-Sent Events, OpenAI's way: `data: <chunk>`
// per event, `: ping` comments while idle, `data: [DONE]` last. Every event
// is flushed at once. It is owned by the handler goroutine.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
	// d, once set, is the detached stream (ssedetach.go) whose connection
	// the events go to, as chunks of the body, instead of w.
	d *sseDetached
	// held: the status and headers are not sent yet, and events gather in
	// pending, until release sends them all or the stream detaches.
	held    bool
	pending []byte
}

// release sends the status and headers of a held stream, and the events
// that waited with them.
func (s *sseWriter) release() error {
	s.held = false
	if err := s.start(); err != nil {
		return err
	}
	if len(s.pending) > 0 {
		s.buf, s.pending = s.pending, nil
		return s.write()
	}
	return nil
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512)}
}

// start sends the status and headers, so that the client sees the stream
// begin before the first token (a held stream's, with its first event or
// when it detaches: ssedetach.go).
func (s *sseWriter) start() error {
	setSSEHeader(s.w.Header())
	s.w.WriteHeader(http.StatusOK)
	return s.rc.Flush()
}

// setSSEHeader sets the header fields of an event stream.
func setSSEHeader(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell nginx not to buffer the stream
}

func (s *sseWriter) event(data []byte) error {
	s.buf = append(s.buf[:0], "data: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, '\n', '\n')
	return s.write()
}

func (s *sseWriter) write() error {
	if s.d != nil {
		return s.d.writeChunk(s.buf)
	}
	if s.held {
		s.pending = append(s.pending, s.buf...)
		return nil
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWriter) chunk(data []byte) error { return s.event(data) }

func (s *sseWriter) ping() error {
	s.buf = append(s.buf[:0], ": ping\n\n"...)
	return s.write()
}

func (s *sseWriter) fail(e *apiError) error {
	s.buf = append(s.buf[:0], "data: "...)
	s.buf = e.appendJSON(s.buf)
	s.buf = append(s.buf, '\n', '\n')
	return s.write()
}

func (s *sseWriter) done() error {
	s.buf = append(s.buf[:0], "data: [DONE]\n\n"...)
	return s.write()
}
