package service

import (
	"encoding/binary"
	"errors"
	"sync"

	"rill/internal/park"
	"rill/internal/wheel"
)

// A WebSocket connection's reader, between the client's messages, parks:
// when nothing of the next message has arrived, the connection goes into
// the server's Poller and the reader's goroutine ends; the first bytes
// start a new one (runReader). The reader is always one: running, or
// parked with its wait in the Poller. A connection with nothing in flight
// then holds no goroutine, and a stream waiting for its engine only its
// request's state.
//
// Two things would wake a parked reader for nothing. The pinger's pongs:
// the pinger writes its own pings (not the library's, whose pongs only the
// library's reader takes, and whose reader then blocks until the next
// message), and a woken reader takes their pongs itself when they are all
// that arrived (takePongs), then parks again. And the connection's close:
// a descriptor closed while in the Poller is forgotten by it, so every
// close (the library's, the writer's, the pinger's, a shutdown's close
// handshake, which reads) first unparks the reader (unpark), which then
// reads on and sees the end.

// runReader is the connection's reader: it reads the client's messages
// until the connection ends, then ends it (finish), or until it parks.
// woken: the Poller found bytes (or the end) for a parked reader.
func (c *wsConn) runReader(woken bool) {
	parked := false
	defer func() {
		if !parked {
			c.finish()
		}
	}()
	defer c.recoverConn("reader")
	if woken && c.takePongs() && c.park() {
		parked = true
		return
	}
	// Woken for more than pongs (a message, the peer's leaving): the
	// library reads before the reader may park again, or an end the
	// Poller keeps reporting would wake it forever.
	parked = c.read(c.ctx, woken)
}

// park parks the reader, when it may and nothing of the next message is
// buffered, and reports whether it did.
func (c *wsConn) park() bool {
	if c.br == nil {
		return false
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.noPark || c.br.Buffered() > 0 || len(c.nc.early) > 0 {
		return false
	}
	stop, err := c.s.poller.Wait(c.nc, func() { go c.runReader(true) })
	if err != nil {
		return false
	}
	c.stopPark = stop
	c.out.rest()
	return true
}

// unpark stops the reader from parking again and wakes it if parked, so
// that it sees the connection's close (called before every close).
func (c *wsConn) unpark() {
	if c.br == nil {
		return
	}
	c.pmu.Lock()
	c.noPark = true
	stop := c.stopPark
	c.stopPark = nil
	c.pmu.Unlock()
	if stop != nil && stop() {
		go c.runReader(true)
	}
}

// takePongs reads, without waiting, the pong frames that woke a parked
// reader, and reports whether nothing else is there (the reader may park
// again). Anything else, a pong split across reads included, is left to
// the library. Under pmu, so that a close handshake (which reads too)
// waits for it.
func (c *wsConn) takePongs() bool {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	c.stopPark = nil
	if c.noPark {
		return false
	}
	c.nc.now.Store(true)
	defer c.nc.now.Store(false)
	for {
		b, err := c.br.Peek(2)
		if len(b) < 2 {
			return len(b) == 0 && errors.Is(err, park.ErrWouldBlock)
		}
		// A client's pong: FIN and opcode 0xA, masked, its length in the
		// first byte (at most 125, RFC 6455 5.5).
		n := 2 + 4 + int(b[1]&0x7f)
		if b[0] != 0x8A || b[1]&0x80 == 0 || n > 2+4+125 {
			return false
		}
		f, _ := c.br.Peek(n)
		if len(f) < n {
			return false
		}
		var payload [125]byte
		p := payload[:n-6]
		for i := range p {
			p[i] = f[6+i] ^ f[2+i%4]
		}
		_, _ = c.br.Discard(n)
		c.pinger.pong(p)
	}
}

// wsPinger pings the connection's peer every ping interval, on the
// server's ping wheel (a few words a connection, not a timer's 230 bytes), and
// closes the connection when the last ping has not been answered by the
// next one. Its pings are its own frames (corkWriter.control), their
// payload a count; their pongs come through the library's reader
// (AcceptOptions.OnPongReceived) or a woken parked reader (takePongs). No
// goroutine waits for a pong.
type wsPinger struct {
	c    *wsConn
	cork *corkWriter

	mu       sync.Mutex
	next     wheel.Entry // the next ping
	stopped  bool
	sent     uint64 // the last ping's count; 0: none yet
	answered bool
	running  sync.WaitGroup // a ping being written; Add under mu while !stopped
}

// startPings starts the pings of the connection, written through cork.
func (c *wsConn) startPings(cork *corkWriter) *wsPinger {
	p := &wsPinger{c: c, cork: cork}
	if c.s.pings != nil && cork != nil {
		p.next.F = p.ping
		c.s.pings.Add(&p.next)
	}
	return p
}

// ping closes the connection if the last ping went unanswered, else sends
// the next one and sets the timer for the one after.
func (p *wsPinger) ping() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	if p.sent != 0 && !p.answered {
		p.mu.Unlock()
		p.c.s.log.Debug("websocket peer did not answer a ping", "id", p.c.connID, "interval", p.c.s.ping)
		_ = p.c.conn.CloseNow()
		return
	}
	p.sent++
	p.answered = false
	frame := binary.BigEndian.AppendUint64([]byte{0x89, 8}, p.sent) // FIN, ping; 8 bytes
	p.running.Add(1)
	p.mu.Unlock()
	defer p.running.Done()
	defer p.c.recoverConn("pinger")
	if err := p.cork.control(frame, p.c.s.writeIdle); err != nil {
		p.c.s.log.Debug("websocket ping failed", "id", p.c.connID, "err", err)
		_ = p.c.conn.CloseNow()
		return
	}
	p.mu.Lock()
	if !p.stopped {
		p.c.s.pings.Add(&p.next)
	}
	p.mu.Unlock()
}

// pong records a pong: the answer to the last ping when its payload is
// that ping's count (other pongs, unsolicited ones, are allowed and
// ignored).
func (p *wsPinger) pong(payload []byte) {
	if p == nil || len(payload) != 8 {
		return
	}
	p.mu.Lock()
	if binary.BigEndian.Uint64(payload) == p.sent {
		p.answered = true
	}
	p.mu.Unlock()
}

// stop ends the pings and waits for one being written (the connection is
// closed by then, which ends its write).
func (p *wsPinger) stop() {
	p.mu.Lock()
	p.stopped = true
	if p.next.F != nil {
		p.c.s.pings.Remove(&p.next)
	}
	p.mu.Unlock()
	p.running.Wait()
}
