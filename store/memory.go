package store

import (
	"container/list"
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// errClosed is returned by every call on a closed store.
var errClosed = errors.New("store is closed")

// Memory is a Store in this process's memory: what rill has always done
// without a data directory. Nothing survives a restart. MaxResponses and
// MaxBytes apply as it writes; MaxAge when Sweep runs. The zero value is
// not usable; call NewMemory.
type Memory struct {
	keep Retention

	mu      sync.Mutex
	closed  bool
	order   *list.List              // visible responses, most recently stored first
	resp    map[string]*memResponse // all held responses, hidden ones included
	items   map[string]string       // output item id -> response id (visible ones)
	streams map[string]*memStream   //
	sorder  *list.List              // streams, most recently updated first
	bytes   int64                   // Data of everything held
}

type memResponse struct {
	r        Response
	el       *list.Element // in order; nil when hidden
	children int           // held responses that name it as Parent
}

type memStream struct {
	s      Stream
	events []Event
	el     *list.Element
}

// NewMemory returns an empty memory store that keeps keep.
func NewMemory(keep Retention) *Memory {
	return &Memory{keep: keep, order: list.New(), sorder: list.New(),
		resp: make(map[string]*memResponse), items: make(map[string]string),
		streams: make(map[string]*memStream)}
}

// PutResponse implements Store.
func (m *Memory) PutResponse(_ context.Context, r Response) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	r.Items = slices.Clone(r.Items)
	r.Data = slices.Clone(r.Data)
	// Replacing keeps the children that name it; its old parent loses one
	// and is collected if that was its last (after the new link, which may
	// be to the same parent).
	children := 0
	var oldParent *memResponse
	if old, ok := m.resp[r.ID]; ok {
		children = old.children
		m.hide(old)
		m.bytes -= int64(len(old.r.Data))
		delete(m.resp, r.ID)
		oldParent = m.unlinkParent(old.r.Parent)
	}
	e := &memResponse{r: r, children: children}
	e.el = m.order.PushFront(e)
	m.resp[r.ID] = e
	for _, it := range r.Items {
		m.items[it] = r.ID
	}
	if p, ok := m.resp[r.Parent]; ok && r.Parent != r.ID {
		p.children++
	}
	m.collect(oldParent)
	m.bytes += int64(len(r.Data))
	m.enforce()
	return nil
}

// GetResponse implements Store.
func (m *Memory) GetResponse(_ context.Context, id string) (Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Response{}, errClosed
	}
	e, ok := m.resp[id]
	if !ok || e.el == nil {
		return Response{}, ErrNotFound
	}
	return e.r, nil
}

// ResponseByItem implements Store.
func (m *Memory) ResponseByItem(ctx context.Context, itemID string) (Response, error) {
	m.mu.Lock()
	id, ok := m.items[itemID]
	m.mu.Unlock()
	if !ok {
		return Response{}, ErrNotFound
	}
	return m.GetResponse(ctx, id)
}

// DeleteResponse implements Store.
func (m *Memory) DeleteResponse(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	e, ok := m.resp[id]
	if !ok || e.el == nil {
		return ErrNotFound
	}
	m.hide(e)
	m.collect(e)
	return nil
}

// Lineage implements Store.
func (m *Memory) Lineage(_ context.Context, id string, max int) ([]Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	e, ok := m.resp[id]
	if !ok || e.el == nil {
		return nil, ErrNotFound
	}
	var out []Response
	// A chain is at most every held response long: that bound ends a
	// cycle a replaced response could close.
	for ok && (max <= 0 || len(out) < max) && len(out) < len(m.resp) {
		out = append(out, e.r)
		if e.r.Parent == "" {
			break
		}
		e, ok = m.resp[e.r.Parent]
	}
	return out, nil
}

// PutStream implements Store.
func (m *Memory) PutStream(_ context.Context, s Stream) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	now := time.Now()
	if s.Updated.IsZero() {
		s.Updated = now
	}
	// s.Data is kept as it is (Store.PutStream): a live log holds it too.
	if st, ok := m.streams[s.ID]; ok {
		s.Created = st.s.Created
		m.bytes += int64(len(s.Data) - len(st.s.Data))
		st.s = s
		m.sorder.MoveToFront(st.el)
	} else {
		if s.Created.IsZero() {
			s.Created = s.Updated
		}
		st := &memStream{s: s}
		st.el = m.sorder.PushFront(st)
		m.streams[s.ID] = st
		m.bytes += int64(len(s.Data))
	}
	m.enforce()
	return nil
}

// GetStream implements Store.
func (m *Memory) GetStream(_ context.Context, id string) (Stream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Stream{}, errClosed
	}
	st, ok := m.streams[id]
	if !ok {
		return Stream{}, ErrNotFound
	}
	return st.s, nil
}

// AppendEvents implements Store.
func (m *Memory) AppendEvents(_ context.Context, id string, events []Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	st, ok := m.streams[id]
	if !ok {
		return ErrNotFound
	}
	for _, ev := range events {
		if n := len(st.events); n > 0 && ev.Seq <= st.events[n-1].Seq {
			continue
		}
		// Kept as it is (Store.AppendEvents): a live log's events are
		// in memory once already.
		st.events = append(st.events, ev)
		m.bytes += int64(len(ev.Data))
	}
	m.enforce()
	return nil
}

// Events implements Store.
func (m *Memory) Events(_ context.Context, id string, after int64, limit int) ([]Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	st, ok := m.streams[id]
	if !ok {
		return nil, ErrNotFound
	}
	i, _ := slices.BinarySearchFunc(st.events, after+1, func(e Event, seq int64) int {
		switch {
		case e.Seq < seq:
			return -1
		case e.Seq > seq:
			return 1
		}
		return 0
	})
	evs := st.events[i:]
	if limit > 0 && len(evs) > limit {
		evs = evs[:limit]
	}
	// Events are immutable once appended; the copy of the slice is the
	// caller's, the Data it shares is never written again.
	return slices.Clone(evs), nil
}

// DeleteStream implements Store.
func (m *Memory) DeleteStream(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errClosed
	}
	st, ok := m.streams[id]
	if !ok {
		return ErrNotFound
	}
	m.dropStream(st)
	return nil
}

// Sweep implements Store.
func (m *Memory) Sweep(_ context.Context, now time.Time) (responses, streams int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, 0, errClosed
	}
	if m.keep.MaxAge > 0 {
		cut := now.Add(-m.keep.MaxAge)
		for el := m.order.Back(); el != nil; {
			e, prev := el.Value.(*memResponse), el.Prev()
			if e.r.Created.Before(cut) {
				m.hide(e)
				m.collect(e)
				responses++
			}
			el = prev
		}
		for el := m.sorder.Back(); el != nil; {
			st, prev := el.Value.(*memStream), el.Prev()
			if st.s.Updated.Before(cut) {
				m.dropStream(st)
				streams++
			}
			el = prev
		}
	}
	r, s := m.enforce()
	return responses + r, streams + s, nil
}

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.resp, m.items, m.streams = nil, nil, nil
	return nil
}

// enforce applies MaxResponses and MaxBytes, oldest first; the caller holds mu.
func (m *Memory) enforce() (responses, streams int) {
	for m.keep.MaxResponses > 0 && m.order.Len() > m.keep.MaxResponses {
		e := m.order.Back().Value.(*memResponse)
		m.hide(e)
		m.collect(e)
		responses++
	}
	for m.keep.MaxBytes > 0 && m.bytes > m.keep.MaxBytes {
		// The older of the oldest response and the oldest stream goes.
		var re *memResponse
		var st *memStream
		if el := m.order.Back(); el != nil {
			re = el.Value.(*memResponse)
		}
		if el := m.sorder.Back(); el != nil {
			st = el.Value.(*memStream)
		}
		switch {
		case re != nil && (st == nil || !st.s.Updated.Before(re.r.Created)):
			m.hide(re)
			m.collect(re)
			responses++
		case st != nil:
			m.dropStream(st)
			streams++
		default:
			return // only hidden responses with children are left
		}
	}
	return
}

// hide takes e out of sight; the caller holds mu.
func (m *Memory) hide(e *memResponse) {
	if e.el == nil {
		return
	}
	m.order.Remove(e.el)
	e.el = nil
	for _, it := range e.r.Items {
		if m.items[it] == e.r.ID {
			delete(m.items, it)
		}
	}
}

// collect removes hidden e for good when nothing names it, and then its
// ancestors that this leaves unnamed; the caller holds mu.
func (m *Memory) collect(e *memResponse) {
	for e != nil && e.el == nil && e.children == 0 {
		delete(m.resp, e.r.ID)
		m.bytes -= int64(len(e.r.Data))
		e = m.unlinkParent(e.r.Parent)
	}
}

// unlinkParent drops one child from response id and returns it; the caller
// holds mu.
func (m *Memory) unlinkParent(id string) *memResponse {
	p, ok := m.resp[id]
	if !ok {
		return nil
	}
	p.children--
	return p
}

func (m *Memory) dropStream(st *memStream) {
	m.sorder.Remove(st.el)
	delete(m.streams, st.s.ID)
	m.bytes -= int64(len(st.s.Data))
	for _, ev := range st.events {
		m.bytes -= int64(len(ev.Data))
	}
}
