package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/coder/websocket"
)

// ErrNoUpgrade is returned (wrapped, with the HTTP status) by DialWebSocket
// when the target answers the handshake without switching protocols.
var ErrNoUpgrade = errors.New("target does not upgrade to WebSocket")

// wsReadLimit bounds one server message; chunks with many logprobs are the
// largest messages the suite asks for.
const wsReadLimit = 16 << 20

// Session is one WebSocket connection to a generation endpoint (docs/design.md §4).
// It is not safe for concurrent use: one goroutine sends and reads.
type Session struct {
	conn *websocket.Conn
	path string
}

// DialWebSocket opens a WebSocket on path ("/v1/chat/completions") with the
// target's API key in the Authorization header and no Origin, as a
// non-browser client connects.
func DialWebSocket(ctx context.Context, t *Target, path string) (*Session, error) {
	u := t.URL(path)
	switch {
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	}
	h := http.Header{}
	t.authorize(h)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h, HTTPClient: t.client()})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("%w: GET %s with Upgrade: websocket answered HTTP %d", ErrNoUpgrade, path, resp.StatusCode)
		}
		return nil, fmt.Errorf("websocket %s: %w", path, err)
	}
	conn.SetReadLimit(wsReadLimit)
	return &Session{conn: conn, path: path}, nil
}

// Close closes the connection with a normal closure.
func (s *Session) Close() error {
	return s.conn.Close(websocket.StatusNormalClosure, "")
}

// SendRaw sends data as one text message, whatever it holds.
func (s *Session) SendRaw(ctx context.Context, data []byte) error {
	if err := s.conn.Write(ctx, websocket.MessageText, data); err != nil {
		return fmt.Errorf("websocket write: %w", err)
	}
	return nil
}

func (s *Session) send(ctx context.Context, msg any) error {
	data, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode websocket message: %w", err)
	}
	return s.SendRaw(ctx, data)
}

// Create starts request id with body, the same JSON as the POST body.
func (s *Session) Create(ctx context.Context, id string, body map[string]any) error {
	return s.send(ctx, map[string]any{"type": "create", "request_id": id, "body": body})
}

// Cancel asks the server to stop request id.
func (s *Session) Cancel(ctx context.Context, id string) error {
	return s.send(ctx, map[string]any{"type": "cancel", "request_id": id})
}

// ServerMessage is one message of the server.
type ServerMessage struct {
	Type string
	// RequestID is nil when the member is absent or null (connection-level errors).
	RequestID *string
	Chunk     json.RawMessage
	Status    int
	Error     json.RawMessage // the "error" member: {"message","type","param","code"}
	Raw       []byte
}

// Next reads the next server message. A message that is not a JSON object
// with a string "type" is an error, as is a closed connection.
func (s *Session) Next(ctx context.Context) (*ServerMessage, error) {
	typ, data, err := s.conn.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("websocket read: %w", err)
	}
	if typ != websocket.MessageText {
		return nil, fmt.Errorf("server sent a binary message (%d bytes); the protocol uses text", len(data))
	}
	var w struct {
		Type      *string         `json:"type"`
		RequestID *string         `json:"request_id"`
		Chunk     json.RawMessage `json:"chunk"`
		Status    int             `json:"status"`
		Error     json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("server message is not a protocol object: %w: %s", err, clip(data))
	}
	if w.Type == nil {
		return nil, fmt.Errorf("server message has no type: %s", clip(data))
	}
	return &ServerMessage{Type: *w.Type, RequestID: w.RequestID, Chunk: w.Chunk,
		Status: w.Status, Error: w.Error, Raw: data}, nil
}

// Collect reads messages until every request in ids has ended (done or
// error) and returns a Transcript per id. Error messages without a
// request_id (connection-level) come back in connErrs, every other message
// that belongs to none of ids in stray. Collect does not close the session;
// a read error (including ctx ending, or RequestTimeout passing) ends it
// early with what was read.
func (s *Session) Collect(ctx context.Context, ids ...string) (trs map[string]*Transcript, connErrs []*ServerMessage, stray []*ServerMessage, err error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	trs = make(map[string]*Transcript, len(ids))
	for _, id := range ids {
		trs[id] = &Transcript{Transport: "WebSocket", Status: http.StatusOK}
	}
	open := len(ids)
	for open > 0 {
		m, err := s.Next(ctx)
		if err != nil {
			return trs, connErrs, stray, err
		}
		if m.RequestID == nil {
			if m.Type == "error" {
				connErrs = append(connErrs, m)
			} else {
				stray = append(stray, m)
			}
			continue
		}
		tr, ok := trs[*m.RequestID]
		if !ok {
			stray = append(stray, m)
			continue
		}
		ended := tr.Done || tr.Error != nil
		if ended {
			tr.Problems = append(tr.Problems, fmt.Sprintf("a %q message arrives after the request ended: %s", m.Type, clip(m.Raw)))
			continue
		}
		switch m.Type {
		case "chunk":
			if isNull(m.Chunk) {
				tr.Problems = append(tr.Problems, fmt.Sprintf("chunk message %d has no chunk member", len(tr.Chunks)))
				continue
			}
			tr.Chunks = append(tr.Chunks, m.Chunk)
		case "done":
			tr.Done = true
			open--
		case "error":
			tr.Status = m.Status
			tr.Error = wrapError(m.Error)
			open--
		default:
			tr.Problems = append(tr.Problems, fmt.Sprintf("message of unknown type %q: %s", m.Type, clip(m.Raw)))
		}
	}
	return trs, connErrs, stray, nil
}

// wrapError turns an error message's "error" member into an ErrorResponse
// document, so that it validates against the same schema as HTTP errors.
func wrapError(e json.RawMessage) json.RawMessage {
	if isNull(e) {
		e = json.RawMessage("null")
	}
	return append(append(json.RawMessage(`{"error":`), e...), '}')
}

// Transport streams one request to a target and returns its transcript.
type Transport interface {
	// Name is "SSE" or "WebSocket".
	Name() string
	// Stream sends body (without "stream": the transport implies it) to path.
	Stream(ctx context.Context, t *Target, path string, body map[string]any) (*Transcript, error)
}

// The two transports of docs/design.md §4.
var (
	SSE       Transport = sseTransport{}
	WebSocket Transport = wsTransport{}
)

type sseTransport struct{}

func (sseTransport) Name() string { return "SSE" }
func (sseTransport) Stream(ctx context.Context, t *Target, path string, body map[string]any) (*Transcript, error) {
	return t.Stream(ctx, path, body)
}

type wsTransport struct{}

func (wsTransport) Name() string { return "WebSocket" }

// Stream opens a connection for the one request, so that requests of
// different specs never share one.
func (wsTransport) Stream(ctx context.Context, t *Target, path string, body map[string]any) (*Transcript, error) {
	s, err := DialWebSocket(ctx, t, path)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	id := "r-" + Nonce()
	if err := s.Create(ctx, id, body); err != nil {
		return nil, err
	}
	trs, connErrs, stray, err := s.Collect(ctx, id)
	if err != nil {
		return nil, err
	}
	tr := trs[id]
	for _, m := range connErrs {
		tr.Problems = append(tr.Problems, "connection-level error message: "+clip(m.Raw))
	}
	for _, m := range stray {
		tr.Problems = append(tr.Problems, "message for no request of this connection: "+clip(m.Raw))
	}
	return tr, nil
}
