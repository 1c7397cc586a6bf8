//go:build !linux

package park

import (
	"errors"
	"net"
)

// Poller is Linux's epoll; elsewhere NewPoller fails and callers keep a
// goroutine per connection.
type Poller struct{}

// NewPoller reports errors.ErrUnsupported off Linux.
func NewPoller() (*Poller, error) { return nil, errors.ErrUnsupported }

// Wait is never reached: no Poller exists off Linux.
func (p *Poller) Wait(c net.Conn, ready func()) (stop func() bool, err error) {
	return nil, errors.ErrUnsupported
}

// Close does nothing.
func (p *Poller) Close() error { return nil }

// Len reports 0.
func (p *Poller) Len() int { return 0 }

// ReadNow reports errors.ErrUnsupported off Linux.
func ReadNow(c net.Conn, p []byte) (int, error) { return 0, errors.ErrUnsupported }
