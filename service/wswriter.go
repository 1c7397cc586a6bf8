package service

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Queue bounds of one connection, in messages. A message is one chunk (a few
// hundred bytes, more with logprobs) or a short control answer, so a
// connection holds at most about wsQueueLen chunks in memory beyond what the
// kernel buffers; a slower reader blocks its requests' goroutines instead.
const (
	wsQueueLen = 64
	wsCtrlLen  = 16
	// wsFrameKeep is the largest buffer a frame returns to the pool; a rare
	// huge chunk is not kept alive for every later one.
	wsFrameKeep = 64 << 10
)

// wsFrame is one outgoing message. Frames come from framePool and go back
// to it once written.
type wsFrame struct{ b []byte }

var framePool = sync.Pool{New: func() any { return &wsFrame{b: make([]byte, 0, 512)} }}

func getFrame() *wsFrame { f := framePool.Get().(*wsFrame); f.b = f.b[:0]; return f }

func putFrame(f *wsFrame) {
	if cap(f.b) <= wsFrameKeep {
		framePool.Put(f)
	}
}

// outbox is the bounded queue of one connection's outgoing messages and the
// loop that writes them. Senders block while it is full, so a client that
// reads slowly holds back only its own connection's requests (which stop
// pulling from their engine streams). put and finish are safe for
// concurrent use; drain runs in one goroutine.
type outbox struct {
	data chan *wsFrame // the requests' messages; FIFO keeps each request's order
	ctrl chan *wsFrame // the reader's answers to bad messages, written first
	// closed is closed when the connection ends; done when drain returns.
	// Nothing waits past either.
	closed <-chan struct{}
	done   chan struct{}
	// finishing asks drain to write what is queued, then close the
	// connection with 1001 (shutdown).
	finishing chan struct{}
	finishOne sync.Once
	// writeIdle bounds each write (0: unbounded).
	writeIdle time.Duration
}

func newOutbox(closed <-chan struct{}, writeIdle time.Duration) *outbox {
	return &outbox{data: make(chan *wsFrame, wsQueueLen), ctrl: make(chan *wsFrame, wsCtrlLen), closed: closed,
		done: make(chan struct{}), finishing: make(chan struct{}), writeIdle: writeIdle}
}

// put queues f on q, waiting for room until stop or the connection closes.
// It takes f either way; errWSEnded means f was dropped.
func (o *outbox) put(q chan<- *wsFrame, f *wsFrame, stop <-chan struct{}) error {
	select {
	case q <- f:
		return nil
	case <-stop:
	case <-o.closed:
	case <-o.done:
	}
	putFrame(f)
	return errWSEnded
}

// finish asks drain to write the messages queued so far and then close the
// connection with 1001 (going away). Messages queued later may be lost.
func (o *outbox) finish() { o.finishOne.Do(func() { close(o.finishing) }) }

// drain writes queued messages to conn, control answers first, until the
// connection closes, a write fails (the peer is gone), or finish was
// called and the queue is empty. Writes run without a context so that they
// do not allocate; a write that makes no progress for writeIdle (a peer
// that reads nothing) is ended by closing conn, and drain then returns
// errWriteIdle.
func (o *outbox) drain(conn *websocket.Conn) error {
	defer close(o.done)
	var stalled atomic.Bool
	var watchdog *time.Timer
	if o.writeIdle > 0 {
		watchdog = time.AfterFunc(time.Hour, func() {
			stalled.Store(true)
			_ = conn.CloseNow()
		})
		watchdog.Stop()
		defer watchdog.Stop()
	}
	ctx := context.Background()
	write := func(f *wsFrame) error {
		if watchdog != nil {
			watchdog.Reset(o.writeIdle)
		}
		err := conn.Write(ctx, websocket.MessageText, f.b)
		if watchdog != nil {
			watchdog.Stop()
		}
		putFrame(f)
		if err != nil && stalled.Load() {
			return errWriteIdle
		}
		return err
	}
	for {
		var f *wsFrame
		select {
		case f = <-o.ctrl:
		default:
			select {
			case f = <-o.ctrl:
			case f = <-o.data:
			case <-o.closed:
				return nil
			case <-o.finishing:
				return o.closeQueued(conn, write)
			}
		}
		if err := write(f); err != nil {
			return err
		}
	}
}

// closeQueued writes what is queued, then closes conn with 1001 and waits
// for the close handshake (the library bounds it).
func (o *outbox) closeQueued(conn *websocket.Conn, write func(*wsFrame) error) error {
	for {
		var f *wsFrame
		select {
		case f = <-o.ctrl:
		case f = <-o.data:
		default:
			return conn.Close(websocket.StatusGoingAway, "server shutting down")
		}
		if err := write(f); err != nil {
			return err
		}
	}
}

// wsWriter is the chunkWriter of one request on a connection: it wraps each
// chunk, unchanged, in {"type":"chunk","request_id":…,"chunk":…} and ends
// the request with a done or error message. Like every chunkWriter it is
// used by one goroutine.
type wsWriter struct {
	out *outbox
	// stop ends the wait for room in the queue: the request's context, which
	// a cancel message or the end of the connection cancels.
	stop   <-chan struct{}
	id     []byte // the request_id as a JSON string
	prefix []byte // {"type":"chunk","request_id":…,"chunk":
	// release takes the request off its connection's books. It runs before
	// the last message is queued, so that a client may reuse the request_id
	// as soon as it has read that message.
	release func()
	// ended is set once the last message (done or error) is queued.
	ended bool
}

// finished reports that the request's last message is queued.
func (w *wsWriter) finished() bool { return w.ended }

// free runs release, for a request whose last message could not be queued.
func (w *wsWriter) free() { w.release() }

func newWSWriter(out *outbox, stop <-chan struct{}, requestID string, release func()) *wsWriter {
	id := appendString(nil, requestID)
	prefix := append([]byte(`{"type":"chunk","request_id":`), id...)
	prefix = append(prefix, `,"chunk":`...)
	return &wsWriter{out: out, stop: stop, id: id, prefix: prefix, release: release}
}

func (w *wsWriter) chunk(data []byte) error {
	f := getFrame()
	f.b = append(f.b, w.prefix...)
	f.b = append(f.b, data...)
	f.b = append(f.b, '}')
	return w.out.put(w.out.data, f, w.stop)
}

// ping is a no-op: the connection's ping frames keep it alive.
func (w *wsWriter) ping() error { return nil }

func (w *wsWriter) fail(e *apiError) error {
	f := getFrame()
	f.b = appendWSError(f.b, w.id, e)
	return w.end(f)
}

func (w *wsWriter) done() error {
	f := getFrame()
	f.b = append(f.b, `{"type":"done","request_id":`...)
	f.b = append(f.b, w.id...)
	f.b = append(f.b, '}')
	return w.end(f)
}

// end queues the last message of the request. It waits for room even when
// the request was cancelled, so that every create gets exactly one done or
// error while the connection lasts.
func (w *wsWriter) end(f *wsFrame) error {
	if w.ended {
		putFrame(f)
		return nil
	}
	w.release()
	if err := w.out.put(w.out.data, f, nil); err != nil {
		return err
	}
	w.ended = true
	return nil
}

// appendWSError appends an error message. id is the request_id as a JSON
// string, or nil for an error that ends no request (written as null).
func appendWSError(b []byte, id []byte, e *apiError) []byte {
	b = append(b, `{"type":"error","request_id":`...)
	if id == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, id...)
	}
	b = append(b, `,"status":`...)
	b = appendInt(b, e.Status)
	b = append(b, `,"error":`...)
	b = e.appendObject(b)
	return append(b, '}')
}
