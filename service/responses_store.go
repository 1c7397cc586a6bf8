package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"rill/engine"
	"rill/store"
)

// DefaultResponsesStore is how many responses the default memory store
// keeps when Options.ResponsesStore is 0.
const DefaultResponsesStore = 1024

// DefaultMemoryStoreBytes bounds what the default memory store holds:
// responses and the event logs of streams together, oldest out first.
// Streams have no other bound there (a durable store has its retention).
const DefaultMemoryStoreBytes = 256 << 20

// storedResponse is a finished response as the service keeps it: the body
// GET answers with, and its place in a conversation. It is immutable once
// made, so it may be read without a lock by whoever holds it.
type storedResponse struct {
	id   string
	body []byte // the final response object, as the last event carried it
	// turn is what this response added to its conversation: its input
	// messages (instructions excluded: they are not carried over) and its
	// reply, one assistant message with its text and tool calls.
	turn []engine.Message
	// parent is the response it continued, nil for none. Read from the
	// store, it is the store's Lineage, hidden responses included, so that
	// a conversation stays whole when older responses left the store.
	parent *storedResponse
	// items are its output items, in order, for item_reference.
	items []storedItem
	// inputItems are its input items as GET …/input_items lists them,
	// each a JSON object with its id, in input order.
	inputItems []json.RawMessage
	// inStore: the response was read from, or written to, the store, so
	// that a response continuing it may name it as its Parent there. A
	// WebSocket connection's last response with store false is not.
	inStore bool
}

// storedItem is one output item of a stored response: its id ("msg_…",
// "fc_…") and the message it stands for when an input refers to it (an
// assistant message with the item's text, or with its one tool call).
type storedItem struct {
	id      string
	message engine.Message
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

// item returns the message of r's output item id.
func (r *storedResponse) item(id string) (engine.Message, bool) {
	for _, it := range r.items {
		if it.id == id {
			return it.message, true
		}
	}
	return engine.Message{}, false
}

// responseRecord is the encoding of a storedResponse in store.Response.Data.
// Its field names are a stored format: a durable store holds them across
// versions, so they are only ever added to.
type responseRecord struct {
	Body  json.RawMessage `json:"body"`
	Turn  []messageRecord `json:"turn"`
	Items []struct {
		ID      string        `json:"id"`
		Message messageRecord `json:"message"`
	} `json:"items"`
	Input []json.RawMessage `json:"input,omitempty"`
}

// messageRecord is an engine.Message as a stored record holds it.
type messageRecord struct {
	Role        string       `json:"role"`
	Content     string       `json:"content,omitempty"`
	NullContent bool         `json:"null_content,omitempty"`
	Name        string       `json:"name,omitempty"`
	Reasoning   string       `json:"reasoning,omitempty"`
	ToolCalls   []callRecord `json:"tool_calls,omitempty"`
	ToolCallID  string       `json:"tool_call_id,omitempty"`
}

type callRecord struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

func toMessageRecord(m engine.Message) messageRecord {
	r := messageRecord{Role: string(m.Role), Content: m.Content, NullContent: m.NullContent, Name: m.Name,
		Reasoning: m.ReasoningContent, ToolCallID: m.ToolCallID}
	for _, c := range m.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, callRecord(c))
	}
	return r
}

func (r messageRecord) message() engine.Message {
	m := engine.Message{Role: engine.Role(r.Role), Content: r.Content, NullContent: r.NullContent, Name: r.Name,
		ReasoningContent: r.Reasoning, ToolCallID: r.ToolCallID}
	for _, c := range r.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, engine.ToolCall(c))
	}
	return m
}

// encodeResponse is r as the store keeps it. A parent the store does not
// hold (a WebSocket connection's unstored last response) cannot be named
// as Parent: its conversation is folded into r's turn instead, so that r's
// conversation stays whole.
func encodeResponse(r *storedResponse) (store.Response, error) {
	turn, parent := r.turn, r.parent
	if parent != nil && !parent.inStore {
		turn = append(parent.history(), turn...)
		parent = nil
	}
	rec := responseRecord{Body: r.body, Input: r.inputItems}
	for _, m := range turn {
		rec.Turn = append(rec.Turn, toMessageRecord(m))
	}
	ids := make([]string, 0, len(r.items))
	for _, it := range r.items {
		rec.Items = append(rec.Items, struct {
			ID      string        `json:"id"`
			Message messageRecord `json:"message"`
		}{it.id, toMessageRecord(it.message)})
		ids = append(ids, it.id)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return store.Response{}, fmt.Errorf("encode response %s: %w", r.id, err)
	}
	out := store.Response{ID: r.id, Items: ids, Data: data}
	if parent != nil {
		out.Parent = parent.id
	}
	return out, nil
}

// decodeResponse reads one stored response, without its parent.
func decodeResponse(sr store.Response) (*storedResponse, error) {
	var rec responseRecord
	if err := json.Unmarshal(sr.Data, &rec); err != nil {
		return nil, fmt.Errorf("decode stored response %s: %w", sr.ID, err)
	}
	r := &storedResponse{id: sr.ID, body: rec.Body, inputItems: rec.Input, inStore: true}
	for _, m := range rec.Turn {
		r.turn = append(r.turn, m.message())
	}
	for _, it := range rec.Items {
		r.items = append(r.items, storedItem{id: it.ID, message: it.Message.message()})
	}
	return r, nil
}

// responseStore is the service's view of a store.Store: stored responses
// as storedResponse. A nil *responseStore keeps nothing (--responses-store
// 0): every method is safe on it and finds nothing.
type responseStore struct {
	st store.Store
}

// enabled reports whether the store keeps anything.
func (s *responseStore) enabled() bool { return s != nil }

// put stores r.
func (s *responseStore) put(ctx context.Context, r *storedResponse) error {
	if s == nil {
		return nil
	}
	sr, err := encodeResponse(r)
	if err != nil {
		return err
	}
	if err := s.st.PutResponse(ctx, sr); err != nil {
		return fmt.Errorf("store response %s: %w", r.id, err)
	}
	return nil
}

// get returns response id with its conversation (its parents, as far as
// the store's Lineage reaches). A response the store does not hold is
// store.ErrNotFound.
func (s *responseStore) get(ctx context.Context, id string) (*storedResponse, error) {
	if s == nil {
		return nil, store.ErrNotFound
	}
	chain, err := s.st.Lineage(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	var head, last *storedResponse
	for _, sr := range chain {
		r, err := decodeResponse(sr)
		if err != nil {
			return nil, err
		}
		if last == nil {
			head = r
		} else {
			last.parent = r
		}
		last = r
	}
	if head == nil {
		return nil, store.ErrNotFound
	}
	return head, nil
}

// one returns response id alone, without its conversation: what GET and
// input_items need.
func (s *responseStore) one(ctx context.Context, id string) (*storedResponse, error) {
	if s == nil {
		return nil, store.ErrNotFound
	}
	sr, err := s.st.GetResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	return decodeResponse(sr)
}

// item returns the message of the output item whose id is id.
func (s *responseStore) item(ctx context.Context, id string) (engine.Message, error) {
	if s == nil {
		return engine.Message{}, store.ErrNotFound
	}
	sr, err := s.st.ResponseByItem(ctx, id)
	if err != nil {
		return engine.Message{}, err
	}
	r, err := decodeResponse(sr)
	if err != nil {
		return engine.Message{}, err
	}
	m, ok := r.item(id)
	if !ok {
		return engine.Message{}, store.ErrNotFound
	}
	return m, nil
}

// delete hides response id; responses that continued it keep their
// conversation (the store's hidden responses).
func (s *responseStore) delete(ctx context.Context, id string) error {
	if s == nil {
		return store.ErrNotFound
	}
	return s.st.DeleteResponse(ctx, id)
}

// storeFailed answers a request the store could not serve: the server's
// fault, and likely passing (a shared store out of reach), so retryable.
func storeFailed() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "store_unavailable", RetryAfter: 1,
		Message: "The response store could not be reached; retry later."}
}

// isNotFound reports whether err is the store's not found.
func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
