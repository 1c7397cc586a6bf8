package park

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// DefaultParkAfter is how long a keep-alive connection waits between
// requests in net/http's hands before it is parked: a client that sends
// its next request sooner keeps its server-side state, and one that comes
// back later pays for a new one (a goroutine and two pooled buffers, what
// a new connection costs without the TCP handshake).
const DefaultParkAfter = time.Second

// ListenerOptions configures a Listener; the zero value means defaults.
type ListenerOptions struct {
	// ParkAfter: see DefaultParkAfter. Zero means DefaultParkAfter.
	ParkAfter time.Duration
}

// Listener hands an http.Server its connections and takes back those that
// idle between requests. Serve with it and set the server's ConnState to
// the Listener's:
//
//	ln = park.NewListener(ln, poller, park.ListenerOptions{})
//	srv.ConnState = ln.ConnState
//
// An idle keep-alive connection (http.StateIdle) that receives nothing for
// ParkAfter is parked: net/http's serving of it ends as for a client that
// left, except that the connection is not closed but put in the Poller,
// and Accept returns it again when bytes arrive. It is closed when the
// server's IdleTimeout (the read deadline net/http set) passes, or the
// Listener closes. A connection is parked only when net/http holds none
// of its bytes (a pipelined request's start): see conn.Read.
//
// Only plain HTTP/1.x connections are parked; hijacked ones (WebSocket,
// detached streams) are the handler's, and HTTP/2 is not served here.
type Listener struct {
	net.Listener
	p     *Poller
	after time.Duration

	accepted chan accepted // from the accept goroutine
	woken    chan struct{} // a parked connection was queued (capacity 1)
	done     chan struct{} // closed by Close

	mu     sync.Mutex
	queue  []net.Conn           // woken, for Accept
	parked map[*parkedConn]bool // waiting in the Poller or for their deadline
	closed bool

	acceptDone chan struct{} // closed when the accept goroutine returns
}

type accepted struct {
	c   net.Conn
	err error
}

// parkedConn is a connection waiting for its next request.
type parkedConn struct {
	c     net.Conn
	stop  func() bool // the Poller's wait
	timer *time.Timer // the idle deadline; nil when none
}

// NewListener wraps ln. The Listener's accept goroutine ends when ln
// fails or the Listener is closed; Close waits for it.
func NewListener(ln net.Listener, p *Poller, opts ListenerOptions) *Listener {
	if opts.ParkAfter <= 0 {
		opts.ParkAfter = DefaultParkAfter
	}
	l := &Listener{Listener: ln, p: p, after: opts.ParkAfter,
		accepted: make(chan accepted), woken: make(chan struct{}, 1), done: make(chan struct{}),
		parked: make(map[*parkedConn]bool), acceptDone: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// acceptLoop accepts from the wrapped listener until it fails for good
// (it was closed) or the Listener closes.
func (l *Listener) acceptLoop() {
	defer close(l.acceptDone)
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Accept returns the next new or woken connection.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if len(l.queue) > 0 {
			c := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			l.mu.Unlock()
			return c, nil
		}
		l.mu.Unlock()
		select {
		case a := <-l.accepted:
			if a.err != nil {
				return nil, a.err
			}
			return &conn{Conn: a.c, l: l}, nil
		case <-l.woken:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
}

// Close closes the wrapped listener and every parked connection (an idle
// connection, as http.Server.Shutdown closes its own), and waits for the
// accept goroutine.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	queue := l.queue
	l.queue = nil
	l.mu.Unlock()
	err := l.Listener.Close()
	<-l.acceptDone
	for _, c := range queue {
		c.Close()
	}
	// No connection parks once closed is set: those parked now are all.
	l.mu.Lock()
	parked := make([]*parkedConn, 0, len(l.parked))
	for pc := range l.parked {
		parked = append(parked, pc)
	}
	l.mu.Unlock()
	for _, pc := range parked {
		if l.unpark(pc) {
			pc.c.Close()
		}
	}
	return err
}

// Parked reports how many connections are parked.
func (l *Listener) Parked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.parked)
}

// ConnState is the http.Server's ConnState hook (chain it with another
// when the server has one): it tells a connection when it is idle.
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	if pc, ok := c.(*conn); ok {
		pc.mu.Lock()
		pc.idle = st == http.StateIdle
		pc.mu.Unlock()
	}
}

// park puts c, net/http done with it, in the Poller until its next
// request or deadline (zero: none). It closes c when it cannot.
func (l *Listener) park(c net.Conn, deadline time.Time) {
	pc := &parkedConn{c: c}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.parked[pc] = true
	// Under mu, so that unpark, which takes it, sees stop and timer set.
	stop, err := l.p.Wait(c, func() { l.wake(pc) })
	if err != nil {
		delete(l.parked, pc)
		l.mu.Unlock()
		c.Close()
		return
	}
	pc.stop = stop
	if !deadline.IsZero() {
		pc.timer = time.AfterFunc(time.Until(deadline), func() {
			if l.unpark(pc) {
				c.Close()
			}
		})
	}
	l.mu.Unlock()
}

// unpark takes pc out of the parked set; only the caller that gets true
// (the wake, the deadline or Close) goes on with the connection.
func (l *Listener) unpark(pc *parkedConn) bool {
	l.mu.Lock()
	ok := l.parked[pc]
	delete(l.parked, pc)
	l.mu.Unlock()
	if ok {
		pc.stop()
		if pc.timer != nil {
			pc.timer.Stop()
		}
	}
	return ok
}

// wake queues a parked connection whose next request arrived (or whose
// peer left: net/http reads that as it would have) for Accept. It runs on
// the Poller's goroutine and does not block.
func (l *Listener) wake(pc *parkedConn) {
	if !l.unpark(pc) {
		return
	}
	_ = pc.c.SetReadDeadline(time.Time{})
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		pc.c.Close()
		return
	}
	l.queue = append(l.queue, &conn{Conn: pc.c, l: l})
	l.mu.Unlock()
	select {
	case l.woken <- struct{}{}:
	default:
	}
}

// ErrWouldBlock is ReadNow's when nothing has arrived.
var ErrWouldBlock = errors.New("park: nothing to read yet")

// errParked ends net/http's wait for the next request on a connection
// being parked. net/http takes it for a client that left: it closes the
// connection without writing, and conn.Close parks it instead.
var errParked = errors.New("park: connection parked")

// conn is a connection served by net/http. Between requests, a Read that
// finds nothing for the Listener's ParkAfter ends with errParked and the
// Close that follows parks the connection.
type conn struct {
	net.Conn
	l *Listener

	mu       sync.Mutex
	idle     bool      // http.StateIdle: between requests
	deadline time.Time // the read deadline net/http set
	fullRead int       // len of the first Read: net/http's buffer, empty
	parking  bool      // the last Read ended with errParked: Close parks
	gone     bool      // parked (or closed): the Conn is no longer ours
}

// Read reads as the wrapped connection does, except between requests.
// There net/http waits for the next request's first bytes with a read
// into its buffer: when that read is of the whole buffer (net/http holds
// none of the connection's bytes; fewer would be a pipelined request's
// start) and ParkAfter passes first, Read reports errParked.
func (c *conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.fullRead == 0 {
		c.fullRead = len(p)
	}
	idle, dl := c.idle && len(p) >= c.fullRead, c.deadline
	c.mu.Unlock()
	if !idle {
		return c.Conn.Read(p)
	}
	parkAt := time.Now().Add(c.l.after)
	if !dl.IsZero() && !parkAt.Before(dl) {
		return c.Conn.Read(p) // net/http's deadline comes first
	}
	_ = c.Conn.SetReadDeadline(parkAt)
	n, err := c.Conn.Read(p)
	if n == 0 && isTimeout(err) && !time.Now().Before(parkAt) {
		c.mu.Lock()
		c.parking = c.idle
		c.mu.Unlock()
		return 0, errParked
	}
	_ = c.Conn.SetReadDeadline(dl)
	return n, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// SetReadDeadline keeps net/http's deadline for Read's own to go back to.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline is SetReadDeadline's too.
func (c *conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// Close parks the connection when Read has just reported errParked and
// nothing has been read since; otherwise it closes it. Once parked, the
// Conn is the Listener's, and Close does nothing.
func (c *conn) Close() error {
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return nil
	}
	c.gone = true
	parking, dl := c.parking && c.idle, c.deadline
	c.mu.Unlock()
	if parking {
		c.l.park(c.Conn, dl)
		return nil
	}
	return c.Conn.Close()
}

// CloseWrite half-closes, as net/http does before closing a connection
// whose request body it did not read.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn returns the wrapped connection (its descriptor is the Poller's
// to wait on, when a hijacked connection's new owner parks it: rawConn).
func (c *conn) NetConn() net.Conn { return c.Conn }

// rawConn reaches c's descriptor: c's own when it is a syscall.Conn, else
// that of the connection it wraps, found through NetConn (as tls.Conn and
// this package's and its users' wrappers give it).
func rawConn(c net.Conn) (syscall.RawConn, error) {
	for {
		if sc, ok := c.(syscall.Conn); ok {
			rc, err := sc.SyscallConn()
			if err != nil {
				return nil, fmt.Errorf("park: %w", err)
			}
			return rc, nil
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, errors.New("park: connection has no descriptor")
		}
		c = w.NetConn()
	}
}
