package service

import (
	"cmp"
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
// writer that sends them. Senders block while it is full, so a client that
// reads slowly holds back only its own connection's requests (which stop
// pulling from their engine streams). The writer is a goroutine that runs
// while messages are queued and ends when the queue is empty: an idle
// connection has none. put and finish are safe for concurrent use.
type outbox struct {
	data chan *wsFrame // the requests' messages; FIFO keeps each request's order
	ctrl chan *wsFrame // the reader's answers to bad messages, written first
	// closed is closed when the connection ends; done when the writer has
	// ended for good (a write failed, or finish's close was sent). Nothing
	// waits past either.
	closed <-chan struct{}
	done   chan struct{}
	// finishing asks the writer to write what is queued, then close the
	// connection with 1001 (shutdown).
	finishing chan struct{}
	finishOne sync.Once
	// writeIdle bounds each write (0: unbounded).
	writeIdle time.Duration

	// Set by writeTo; conn is nil for a queue nobody writes out (tests).
	conn  *websocket.Conn
	cork  *corkWriter // gathers each message into one write; may be nil
	spawn func(func())
	ended func(error)
	// active is set while a writer goroutine runs (or is being started).
	active atomic.Bool
	// The writer's: a write that makes no progress for writeIdle (a peer
	// that reads nothing) is ended by closing conn; stalled says so.
	watchdog *time.Timer
	stalled  atomic.Bool
}

func newOutbox(closed <-chan struct{}, writeIdle time.Duration) *outbox {
	return &outbox{data: make(chan *wsFrame, wsQueueLen), ctrl: make(chan *wsFrame, wsCtrlLen), closed: closed,
		done: make(chan struct{}), finishing: make(chan struct{}), writeIdle: writeIdle}
}

// writeTo makes o write its messages to conn, each through cork (when not
// nil) in one write. spawn runs the writer goroutine, when there is
// something to write; ended is called once, from the writer, with the
// error that ended it for good (nil after finish's close).
func (o *outbox) writeTo(conn *websocket.Conn, cork *corkWriter, spawn func(func()), ended func(error)) {
	o.conn, o.cork, o.spawn, o.ended = conn, cork, spawn, ended
}

// put queues f on q, waiting for room until stop or the connection closes.
// It takes f either way; errWSEnded means f was dropped.
func (o *outbox) put(q chan<- *wsFrame, f *wsFrame, stop <-chan struct{}) error {
	select {
	case q <- f:
		o.kick()
		return nil
	case <-stop:
	case <-o.closed:
	case <-o.done:
	}
	putFrame(f)
	return errWSEnded
}

// finish asks the writer to write the messages queued so far and then close
// the connection with 1001 (going away). Messages queued later may be lost.
func (o *outbox) finish() {
	o.finishOne.Do(func() { close(o.finishing) })
	o.kick()
}

// kick starts the writer unless one runs.
func (o *outbox) kick() {
	if o.conn != nil && o.active.CompareAndSwap(false, true) {
		o.spawn(o.run)
	}
}

// pending reports whether a writer has something to do.
func (o *outbox) pending() bool {
	if len(o.ctrl) > 0 || len(o.data) > 0 {
		return true
	}
	select {
	case <-o.finishing:
		return true
	case <-o.closed:
		return true
	default:
		return false
	}
}

// run is the writer: it writes what is queued and returns when the queue
// is empty, or ends the outbox for good (see writeQueued).
func (o *outbox) run() {
	for {
		over, err := o.writeQueued()
		if over {
			close(o.done)
			o.ended(err)
			return // active stays set: no writer starts again
		}
		o.active.Store(false)
		// A message queued after the queue was found empty, but before
		// active was cleared, started no writer: this one carries on.
		if !o.pending() || !o.active.CompareAndSwap(false, true) {
			return
		}
	}
}

// writeQueued writes queued messages, control answers first, until the
// queue is empty (over is false), or the outbox is over: the connection
// closed, a write failed (the peer is gone, or stalled: errWriteIdle), or
// finish was called and its close frame sent. Writes run without a
// context so that they do not allocate.
func (o *outbox) writeQueued() (over bool, err error) {
	for {
		var f *wsFrame
		select {
		case f = <-o.ctrl:
		default:
			select {
			case f = <-o.ctrl:
			case f = <-o.data:
			case <-o.closed:
				return true, nil
			case <-o.finishing:
				return true, o.closeQueued()
			default:
				return false, nil
			}
		}
		if err := o.write(f); err != nil {
			return true, err
		}
	}
}

// write sends one message and gives f back to the pool.
func (o *outbox) write(f *wsFrame) error {
	if o.writeIdle > 0 {
		if o.watchdog == nil {
			conn := o.conn
			o.watchdog = time.AfterFunc(o.writeIdle, func() {
				o.stalled.Store(true)
				_ = conn.CloseNow()
			})
		} else {
			o.watchdog.Reset(o.writeIdle)
		}
	}
	if o.cork != nil {
		o.cork.cork()
	}
	err := o.conn.Write(context.Background(), websocket.MessageText, f.b)
	if o.cork != nil {
		err = cmp.Or(err, o.cork.uncork())
	}
	if o.watchdog != nil {
		o.watchdog.Stop()
	}
	putFrame(f)
	if err != nil && o.stalled.Load() {
		return errWriteIdle
	}
	return err
}

// closeQueued writes what is queued, then closes conn with 1001 and waits
// for the close handshake (the library bounds it).
func (o *outbox) closeQueued() error {
	for {
		var f *wsFrame
		select {
		case f = <-o.ctrl:
		case f = <-o.data:
		default:
			return o.conn.Close(websocket.StatusGoingAway, "server shutting down")
		}
		if err := o.write(f); err != nil {
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
