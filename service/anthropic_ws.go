package service

import (
	"context"
)

// The Messages API over rill's WebSocket transport: GET /v1/messages with
// an upgrade opens a connection that carries many messages at once, named
// by the client, with the framing of chat's (docs/design.md §4):
//
//	client → {"type":"create","request_id":"r1","body":{…the POST body…}}
//	client → {"type":"cancel","request_id":"r1"}
//	server → every event of the message, the JSON of its SSE data with
//	         "request_id" added: {"request_id":"r1","type":"message_start",…}
//	         … {"request_id":"r1","type":"message_stop"}
//	server → {"type":"error","request_id":"r1"|null,"status":400,
//	         "error":{"type":"invalid_request_error","message":"…"}}
//
// Every create ends with one message_stop or one error (Anthropic's shape
// and status: 529 overloaded_error for an overloaded engine). The
// connection machinery (reading, limits, cancel, keepalive, the outgoing
// queue, shutdown) is wsConn's; this file is the Messages API's side.

// messagesWSWriter is the messageWriter of one message on a connection.
// It adds the request_id to each event, ends the request with
// message_stop or an error, and sends no pings (the connection's ping
// frames keep it alive).
type messagesWSWriter struct{ *wsWriter }

// event frames data with the request_id as its first member, which keeps
// every other byte of the SSE event's data.
func (w messagesWSWriter) event(typ string, data []byte) error {
	f := getFrame()
	f.b = append(f.b, `{"request_id":`...)
	f.b = append(f.b, w.id...)
	f.b = append(f.b, ',')
	f.b = append(f.b, data[1:]...)
	if typ == "message_stop" {
		return w.end(f)
	}
	return w.out.put(w.out.data, f, w.stop)
}

func (w messagesWSWriter) ping() error { return nil }

func (w messagesWSWriter) fail(e *apiError) error {
	f := getFrame()
	f.b = appendMessagesWSError(f.b, w.id, e)
	return w.end(f)
}

// appendMessagesWSError appends an error message of a connection to
// /v1/messages: {"type":"error","request_id":…,"status":S,"error":{…}} with
// Anthropic's error object and status. id is the request_id as a JSON
// string, or nil for an error that ends no request (written as null).
func appendMessagesWSError(b []byte, id []byte, e *apiError) []byte {
	status, _ := anthropicStatus(e)
	b = append(b, `{"type":"error","request_id":`...)
	if id == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, id...)
	}
	b = append(b, `,"status":`...)
	b = appendInt(b, status)
	b = append(b, `,"error":`...)
	b = appendAnthropicErrorObject(b, e)
	return append(b, '}')
}

// runMessage serves one create on a connection to /v1/messages, as run
// serves chat's: validate and start it as its POST would be, then stream
// its events. ctx is the request's context, which a cancel message or the
// end of the connection cancels. Exactly one message_stop or error ends
// the request while the connection lasts.
func (c *wsConn) runMessage(ctx context.Context, id string, req *wsRequest, release func(), body []byte) {
	w := messagesWSWriter{newWSWriter(c.out, ctx.Done(), id, func() { c.release(id, req) })}
	c.serveRequest(ctx, id, req, w, release, func() (*wsRun, *apiError) {
		g, skipped, e := c.s.startMessage(ctx, body, alwaysStreamed)
		if len(skipped) > 0 {
			c.s.warnSkipped(c.connID+"/"+id, skipped)
		}
		if e != nil {
			return nil, e
		}
		return &wsRun{g: g.generation, model: g.model, steps: g.newMessageStream(ctx, g.encoder(w), 0)}, nil
	})
}
