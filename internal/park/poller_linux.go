//go:build linux

package park

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
)

// Poller waits for many connections to become readable on one goroutine:
// an epoll set of its own, level-triggered and one-shot, beside the Go
// runtime's. Each Wait is one entry in a map and one in the kernel's set
// (about 100 bytes), against a goroutine's stack (4 KB and up) for a
// goroutine blocked in Read.
//
// A Poller is safe for concurrent use. Its goroutine starts with
// NewPoller and ends with Close.
type Poller struct {
	epfd int
	wake [2]int // a pipe: Close writes to wake[1], which ends the loop

	mu     sync.Mutex
	next   uint64 // the last id given; 0 is the wake pipe's
	waits  map[uint64]*waiter
	closed bool

	done      chan struct{} // closed when the loop has returned
	closeOnce sync.Once
}

// waiter is one Wait: the connection's descriptor, reached through rc,
// and what to call.
type waiter struct {
	rc    syscall.RawConn
	ready func()
}

// NewPoller starts a Poller.
func NewPoller() (*Poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	p := &Poller{epfd: epfd, waits: make(map[uint64]*waiter), done: make(chan struct{})}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("epoll: wake pipe: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN} // id 0
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.closeFDs()
		return nil, fmt.Errorf("epoll: add wake pipe: %w", err)
	}
	go p.loop()
	return p, nil
}

func (p *Poller) closeFDs() {
	syscall.Close(p.epfd)
	syscall.Close(p.wake[0])
	syscall.Close(p.wake[1])
}

// Wait calls ready once, on the Poller's goroutine, when c has bytes to
// read, its peer has closed its side or reset it, or the Poller closes;
// ready must not block (it hands its work to a goroutine). stop withdraws
// the wait: it reports true when ready has not run and now never will,
// false when ready ran or is running. The caller must stop a wait it no
// longer wants before it closes c: the kernel forgets a closed descriptor
// on its own, and ready would then never run.
//
// A connection may have one wait at a time. Wait fails when c has no
// descriptor (see rawConn), is closed, or the Poller is.
func (p *Poller) Wait(c net.Conn, ready func()) (stop func() bool, err error) {
	rc, err := rawConn(c)
	if err != nil {
		return nil, err
	}
	w := &waiter{rc: rc, ready: ready}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errClosed
	}
	p.next++
	id := p.next
	p.waits[id] = w
	p.mu.Unlock()
	var cerr error
	err = rc.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
			Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
		cerr = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err = errors.Join(err, cerr); err != nil {
		p.mu.Lock()
		delete(p.waits, id)
		p.mu.Unlock()
		return nil, fmt.Errorf("park: epoll add: %w", err)
	}
	return func() bool { return p.take(id) != nil }, nil
}

// take removes the wait id, the one caller that gets it withdrawing its
// descriptor from the set (the one shot left it there, disarmed).
func (p *Poller) take(id uint64) *waiter {
	p.mu.Lock()
	w := p.waits[id]
	delete(p.waits, id)
	p.mu.Unlock()
	if w != nil {
		_ = w.rc.Control(func(fd uintptr) {
			_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
		})
	}
	return w
}

var errClosed = errors.New("park: poller closed")

// loop waits on the set until Close, calling the ready of each wait whose
// connection became readable; at Close, those of every wait left.
func (p *Poller) loop() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			// Not expected of a valid set: end as Close would, waking
			// every wait, so that nobody is left waiting on a set that
			// no longer answers.
			p.shut()
			return
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				p.shut()
				return
			}
			if w := p.take(id); w != nil {
				w.ready()
			}
		}
	}
}

// shut refuses new waits and wakes every wait left.
func (p *Poller) shut() {
	p.mu.Lock()
	p.closed = true
	ids := make([]uint64, 0, len(p.waits))
	for id := range p.waits {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		if w := p.take(id); w != nil {
			w.ready()
		}
	}
}

// Close ends the Poller: the waits left are woken (their owners go on
// reading on goroutines of their own), then its goroutine and descriptors
// are gone. Close waits for the goroutine; it may be called more than
// once.
func (p *Poller) Close() error {
	p.closeOnce.Do(func() {
		_, _ = syscall.Write(p.wake[1], []byte{1})
		<-p.done
		p.closeFDs()
	})
	return nil
}

// Len reports how many waits are pending (0 for a nil Poller).
func (p *Poller) Len() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waits)
}

// ReadNow reads what c has for p without waiting: one read(2), which
// reports ErrWouldBlock when nothing has arrived, io.EOF when the peer
// closed its side. For a reader woken by a Poller that must not block
// (it holds a lock a closer waits for).
func ReadNow(c net.Conn, p []byte) (int, error) {
	rc, err := rawConn(c)
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), p)
		return true // one try: no wait for readiness
	}); err != nil {
		return 0, err
	}
	switch {
	case rerr == syscall.EAGAIN:
		return 0, ErrWouldBlock
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Addr: c.RemoteAddr(), Err: rerr}
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}
