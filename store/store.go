// Package store keeps what must outlive one request, and may outlive the
// process: stored responses of the Responses API (previous_response_id,
// GET /v1/responses/{id}) and the event logs of background responses and
// resumable streams. The service encodes what it keeps; a Store holds bytes,
// ids, sequence numbers and times, and understands none of them.
//
// Implementations: Memory here (one process, nothing survives a restart);
// durable ones in sub-packages (an embedded file database under a data
// directory, and shared stores for several replicas). Every implementation
// passes storetest.Run, which pins the contract written on Store.
package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned (wrapped or as is) for an id the store does not
// hold, or holds only hidden (see Store).
var ErrNotFound = errors.New("not found")

// Response is one stored response of the Responses API.
type Response struct {
	// ID is the response's id ("resp_…"), unique in the store.
	ID string
	// Parent is the id of the response it continued (previous_response_id),
	// empty for none.
	Parent string
	// Items are the ids of its output items ("msg_…", "fc_…"), each of
	// which resolves to this response through ResponseByItem.
	Items []string
	// Data is the service's encoding of the response (its body and its
	// turn of the conversation). The store never reads it.
	Data []byte
	// Created is when it was stored; retention by age counts from it.
	Created time.Time
}

// Stream is the state of one event log: a background response or a
// resumable stream. Its events are appended with AppendEvents.
type Stream struct {
	// ID names the stream (a response id, or a chat or completion stream's
	// id), unique in the store.
	ID string
	// Status is the service's word for the stream's state ("queued",
	// "in_progress", "completed", "cancelled", ...). The store keeps it and
	// reports it; it gives no status a meaning.
	Status string
	// Data is the service's encoding of what it needs to serve the stream
	// again (the request's input items, the object's shape, ...).
	Data []byte
	// Created is when the stream was first put; Updated when it last was.
	// PutStream keeps the Created of an existing stream and sets Updated.
	Created, Updated time.Time
}

// Event is one entry of a stream's log.
type Event struct {
	// Seq orders a stream's events: strictly increasing along the log, not
	// necessarily dense. The Responses API's sequence_number fits it.
	Seq int64
	// Data is the event as the service will send it again.
	Data []byte
}

// Retention bounds what a store keeps. Zero fields mean no bound of that
// kind.
type Retention struct {
	// MaxAge hides responses and drops streams (with their events) whose
	// Created (responses) or Updated (streams) is older than this.
	MaxAge time.Duration
	// MaxBytes bounds the Data of responses, streams and events together;
	// over it, the oldest go first (responses hidden, streams dropped).
	MaxBytes int64
	// MaxResponses bounds the number of visible responses; over it the
	// least recently stored are hidden.
	MaxResponses int
}

// Store is the contract every implementation keeps. All methods are safe
// for concurrent use, by several goroutines and, for shared stores, by
// several processes. ctx bounds each call; a store holds no ctx.
//
// Hidden responses. DeleteResponse and retention hide a response: GetResponse
// and ResponseByItem answer ErrNotFound for it from then on. A hidden
// response's record is kept while a stored response names it as Parent,
// so that Lineage of a later response is still whole (a conversation does
// not lose its beginning when its first response is deleted or ages out);
// it is removed for good once nothing names it.
type Store interface {
	// PutResponse stores r, replacing a response with the same ID.
	PutResponse(ctx context.Context, r Response) error
	// GetResponse returns the visible response id.
	GetResponse(ctx context.Context, id string) (Response, error)
	// ResponseByItem returns the visible response one of whose Items is
	// itemID.
	ResponseByItem(ctx context.Context, itemID string) (Response, error)
	// DeleteResponse hides response id; ErrNotFound if it was not visible.
	DeleteResponse(ctx context.Context, id string) error
	// Lineage returns response id and the responses it continued, newest
	// first, hidden ones included, following Parent until a response has
	// none or names one the store no longer holds; at most max entries
	// (max <= 0: no limit). ErrNotFound if id itself is not visible.
	Lineage(ctx context.Context, id string, max int) ([]Response, error)

	// PutStream creates stream s.ID or updates its Status and Data. The
	// store may keep s.Data as it is: the caller must not change it
	// afterwards.
	PutStream(ctx context.Context, s Stream) error
	// GetStream returns stream id.
	GetStream(ctx context.Context, id string) (Stream, error)
	// AppendEvents appends events, in order, to stream id's log. Events
	// whose Seq is not above the log's last are skipped, so that a retried
	// append is harmless. ErrNotFound if the stream does not exist. The
	// store may keep the events' Data as they are: the caller must not
	// change them afterwards.
	AppendEvents(ctx context.Context, id string, events []Event) error
	// Events returns the events of stream id with Seq > after, in order,
	// at most limit of them (limit <= 0: all). ErrNotFound if the stream
	// does not exist.
	Events(ctx context.Context, id string, after int64, limit int) ([]Event, error)
	// DeleteStream removes stream id and its events; ErrNotFound if absent.
	DeleteStream(ctx context.Context, id string) error

	// Sweep applies the store's Retention now, as of now; it reports how
	// many responses it hid or removed and how many streams it dropped.
	// Stores may also apply retention on their own as they write.
	Sweep(ctx context.Context, now time.Time) (responses, streams int, err error)
	// Close releases the store. Calls after Close fail.
	Close() error
}
