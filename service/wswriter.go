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
// while messages are queued and ends when the queue is empty, and an empty
// queue holds no memory: an idle connection costs only the struct. put and
// finish are safe for concurrent use.
type outbox struct {
	// data holds the requests' messages (FIFO keeps each request's order),
	// ctrl the reader's answers to bad messages, written first. They point
	// at dataQ and ctrlQ.
	data, ctrl *frameQueue
	// closed is closed when the connection ends. Nothing waits past it.
	closed <-chan struct{}
	// writeIdle bounds each write (0: unbounded).
	writeIdle time.Duration

	// Set by writeTo; conn is nil for a queue nobody writes out (tests).
	conn  *websocket.Conn
	cork  *corkWriter // gathers each message into one write; may be nil
	spawn func(func())
	ended func(error)
	// beforeClose, when set, runs before the close handshake (which
	// reads the connection): wsConn.unpark.
	beforeClose func()

	mu           sync.Mutex
	dataQ, ctrlQ frameQueue
	// room, made by a sender that waits for room, is closed (and
	// forgotten) when a message leaves the queue or the outbox is over.
	room chan struct{}
	// active: a writer goroutine runs (or is being started).
	active bool
	// finishing asks the writer to write what is queued, then close the
	// connection with 1001 (shutdown).
	finishing bool
	// over: the writer ended for good (a write failed, or finish's close
	// was sent); nothing more is queued.
	over bool

	// The writer's: a write that makes no progress for writeIdle (a peer
	// that reads nothing) is ended by closing conn; stalled says so.
	// Dropped (under mu, no writer running) by rest.
	watchdog *time.Timer
	stalled  atomic.Bool
}

// frameQueue is one of an outbox's queues; its slice is dropped when it
// empties, so that an idle connection keeps no backing array.
type frameQueue struct {
	frames []*wsFrame
	limit  int
}

func (q *frameQueue) pop() *wsFrame {
	if len(q.frames) == 0 {
		return nil
	}
	f := q.frames[0]
	q.frames[0] = nil
	q.frames = q.frames[1:]
	if len(q.frames) == 0 {
		q.frames = nil
	}
	return f
}

func newOutbox(closed <-chan struct{}, writeIdle time.Duration) *outbox {
	o := &outbox{closed: closed, writeIdle: writeIdle}
	o.dataQ.limit, o.ctrlQ.limit = wsQueueLen, wsCtrlLen
	o.data, o.ctrl = &o.dataQ, &o.ctrlQ
	return o
}

// writeTo makes o write its messages to conn, each through cork (when not
// nil) in one write. spawn runs the writer goroutine, when there is
// something to write; ended is called once, from the writer, with the
// error that ended it for good (nil after finish's close).
func (o *outbox) writeTo(conn *websocket.Conn, cork *corkWriter, spawn func(func()), ended func(error)) {
	o.conn, o.cork, o.spawn, o.ended = conn, cork, spawn, ended
}

// put queues f on q (o.data or o.ctrl), waiting for room until stop or
// the connection closes. It takes f either way; errWSEnded means f was
// dropped.
func (o *outbox) put(q *frameQueue, f *wsFrame, stop <-chan struct{}) error {
	for {
		select {
		case <-stop:
			putFrame(f)
			return errWSEnded
		case <-o.closed:
			putFrame(f)
			return errWSEnded
		default:
		}
		o.mu.Lock()
		if o.over {
			o.mu.Unlock()
			putFrame(f)
			return errWSEnded
		}
		if len(q.frames) < q.limit {
			q.frames = append(q.frames, f)
			start := o.wake()
			o.mu.Unlock()
			if start {
				o.spawn(o.run)
			}
			return nil
		}
		if o.room == nil {
			o.room = make(chan struct{})
		}
		room := o.room
		o.mu.Unlock()
		select {
		case <-room:
		case <-stop:
		case <-o.closed:
		}
	}
}

// wake reports whether a writer must be started, and marks it started.
// Called with mu held.
func (o *outbox) wake() bool {
	if o.conn == nil || o.active || o.over {
		return false
	}
	o.active = true
	return true
}

// rest lets go of the write watchdog's timer while no writer runs: the
// connection waits (its reader parks, or a request waits long for its
// engine), and the next write makes one anew. Between a stream's tokens
// the writer keeps it.
func (o *outbox) rest() {
	o.mu.Lock()
	if !o.active {
		o.watchdog = nil // stopped after the last write
	}
	o.mu.Unlock()
}

// finish asks the writer to write the messages queued so far and then close
// the connection with 1001 (going away). Messages queued later may be lost.
func (o *outbox) finish() {
	o.mu.Lock()
	o.finishing = true
	start := o.wake()
	o.mu.Unlock()
	if start {
		o.spawn(o.run)
	}
}

// run is the writer: it writes what is queued and returns when the queue
// is empty, or ends the outbox for good (see writeQueued).
func (o *outbox) run() {
	over, err := o.writeQueued()
	if !over {
		return
	}
	o.mu.Lock()
	o.over = true
	o.freeRoom()
	o.mu.Unlock()
	o.ended(err)
}

// freeRoom wakes the senders that wait for room. Called with mu held.
func (o *outbox) freeRoom() {
	if o.room != nil {
		close(o.room)
		o.room = nil
	}
}

// next takes the next message to write, control answers first; nil with
// finishing when the queue is empty and finish was called. With neither,
// the writer is done: active is cleared under the same lock, so that a
// message queued after it starts a new writer.
func (o *outbox) next() (f *wsFrame, finishing bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if f = o.ctrlQ.pop(); f == nil {
		f = o.dataQ.pop()
	}
	if f != nil {
		o.freeRoom()
		return f, false
	}
	if !o.finishing {
		o.active = false
	}
	return nil, o.finishing
}

// writeQueued writes queued messages until the queue is empty (over is
// false), or the outbox is over: the connection closed, a write failed (the
// peer is gone, or stalled: errWriteIdle), or finish was called and its
// close frame sent. Writes run without a context so that they do not
// allocate.
func (o *outbox) writeQueued() (over bool, err error) {
	for {
		select {
		case <-o.closed:
			return true, nil
		default:
		}
		f, finishing := o.next()
		switch {
		case f != nil:
			if err := o.write(f); err != nil {
				return true, err
			}
		case finishing:
			if o.beforeClose != nil {
				o.beforeClose()
			}
			return true, o.conn.Close(websocket.StatusGoingAway, "server shutting down")
		default:
			return false, nil
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

// wsWriter is the chunkWriter of one request on a connection: it wraps each
// chunk, unchanged, in {"type":"chunk","request_id":…,"chunk":…} and ends
// the request with a done or error message. Like every chunkWriter it is
// used by one goroutine.
type wsWriter struct {
	out *outbox
	// stop ends the wait for room in the queue: the request's context, which
	// a cancel message or the end of the connection cancels.
	stop <-chan struct{}
	id   []byte // the request_id as a JSON string
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
	return &wsWriter{out: out, stop: stop, id: appendString(nil, requestID), release: release}
}

func (w *wsWriter) chunk(data []byte) error {
	f := getFrame()
	f.b = append(f.b, `{"type":"chunk","request_id":`...)
	f.b = append(f.b, w.id...)
	f.b = append(f.b, `,"chunk":`...)
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
