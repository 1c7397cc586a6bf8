package service

import (
	"container/list"
	"sync"

	"rill/engine"
)

// DefaultResponsesStore is how many responses the store keeps when
// Options.ResponsesStore is 0.
const DefaultResponsesStore = 1024

// storedResponse is a finished response as the store keeps it: the body GET
// answers with, and its place in a conversation. It is immutable once made,
// so it may be read without a lock by whoever holds it.
type storedResponse struct {
	id   string
	body []byte // the final response object, as the last event carried it
	// turn is what this response added to its conversation: its input
	// messages (instructions excluded: they are not carried over) and its
	// output message.
	turn []engine.Message
	// parent is the response it continued, nil for none. A chain is kept
	// alive by its newest response even when older ones left the store, so
	// that a conversation stays whole; it costs the messages once, however
	// long the chain.
	parent *storedResponse
	// outputID is the id of its output message, for item_reference.
	outputID string
}

// history returns the messages of the conversation up to and including r,
// oldest first.
func (r *storedResponse) history() []engine.Message {
	n := 0
	for c := r; c != nil; c = c.parent {
		n += len(c.turn)
	}
	out := make([]engine.Message, n)
	for c := r; c != nil; c = c.parent {
		n -= len(c.turn)
		copy(out[n:], c.turn)
	}
	return out
}

// output returns r's output message (the last of its turn).
func (r *storedResponse) output() engine.Message { return r.turn[len(r.turn)-1] }

// responseStore keeps the most recently stored responses in memory, at most
// limit of them, evicting the least recently used (stored or read). Nothing
// survives a restart. Safe for concurrent use.
type responseStore struct {
	limit int

	mu    sync.Mutex
	lru   *list.List               // of *storedResponse, most recent first
	byID  map[string]*list.Element // response id -> element
	items map[string]*list.Element // output message id -> its response's element
}

// newResponseStore returns a store of at most limit responses; limit <= 0
// returns nil, which stores nothing (every method of a nil store is safe).
func newResponseStore(limit int) *responseStore {
	if limit <= 0 {
		return nil
	}
	return &responseStore{limit: limit, lru: list.New(),
		byID: make(map[string]*list.Element), items: make(map[string]*list.Element)}
}

// enabled reports whether the store keeps anything.
func (s *responseStore) enabled() bool { return s != nil }

// put stores r, evicting the least recently used beyond the limit.
func (s *responseStore) put(r *storedResponse) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byID[r.id]; ok {
		s.remove(el)
	}
	el := s.lru.PushFront(r)
	s.byID[r.id] = el
	if r.outputID != "" {
		s.items[r.outputID] = el
	}
	for s.lru.Len() > s.limit {
		s.remove(s.lru.Back())
	}
}

// get returns response id and marks it recently used.
func (s *responseStore) get(id string) (*storedResponse, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	s.lru.MoveToFront(el)
	return el.Value.(*storedResponse), true
}

// item returns the output message whose id is id, and marks its response
// recently used.
func (s *responseStore) item(id string) (engine.Message, bool) {
	if s == nil {
		return engine.Message{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.items[id]
	if !ok {
		return engine.Message{}, false
	}
	s.lru.MoveToFront(el)
	return el.Value.(*storedResponse).output(), true
}

// delete removes response id; it reports whether it was stored. Responses
// that continued it keep their conversation.
func (s *responseStore) delete(id string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if ok {
		s.remove(el)
	}
	return ok
}

// len is the number of stored responses.
func (s *responseStore) len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}

func (s *responseStore) remove(el *list.Element) {
	r := el.Value.(*storedResponse)
	s.lru.Remove(el)
	delete(s.byID, r.id)
	if r.outputID != "" {
		delete(s.items, r.outputID)
	}
}
