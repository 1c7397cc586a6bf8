package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Resumable streams over the WebSocket transport: a create whose body asks
// for stream_options.resumable runs as on SSE (resumable.go), and each of
// its chunk messages carries "seq". A client that lost its connection
// sends, on a new one,
//
//	{"type":"resume","request_id":"r2","stream_id":"chatcmpl-…","last_seq":N}
//
// and request r2 goes on with the chunks after seq N, then done (or the
// error that ended the stream), as the create's own request would have.

// chunkSeq delivers a chunk of a resumable stream with its seq.
func (w *wsWriter) chunkSeq(seq int64, data []byte) error {
	f := getFrame()
	f.b = append(f.b, `{"type":"chunk","request_id":`...)
	f.b = append(f.b, w.id...)
	f.b = append(f.b, `,"seq":`...)
	f.b = appendInt(f.b, int(seq))
	f.b = append(f.b, `,"chunk":`...)
	f.b = append(f.b, data...)
	f.b = append(f.b, '}')
	return w.out.put(w.out.data, f, w.stop)
}

// followWS sends the chunks of resumable stream id after seq after to w,
// then its end: done when it completed, else the error it ended with.
func (c *wsConn) followWS(ctx context.Context, w *wsWriter, id string, after int64) error {
	sink := &wsLogSink{ctx: ctx, w: w}
	_, _, err := c.s.logs.follow(ctx, id, after, 0, sink.event, nil)
	return sink.end(err)
}

// followEnd sends the end of a followed stream that ended with err (the
// follow's) and ended (the stream's own error event, if it had one), and
// returns what followWS returns.
func followEnd(ctx context.Context, w *wsWriter, err error, ended *apiError) error {
	switch {
	case err != nil && ctx.Err() != nil:
		return err // cancelled, or the connection ended: serveRequest tells
	case errors.Is(err, errStreamLost):
		return w.fail(&apiError{Status: http.StatusBadGateway, Type: typeServer, Code: "stream_lost",
			Message: "The server that ran this stream stopped before it ended."})
	case err != nil:
		return w.fail(storeFailed())
	case ended != nil:
		return w.fail(ended)
	}
	return w.done()
}

// logError reads an error event of a chunk log ({"error":{…}}, as SSE
// sends it) back as the error, with the status its code stands for.
func logError(data []byte) (*apiError, bool) {
	if len(data) < 9 || string(data[:9]) != `{"error":` {
		return nil, false
	}
	var v struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &v) != nil {
		return nil, false
	}
	e := &apiError{Status: http.StatusInternalServerError, Type: v.Error.Type, Message: v.Error.Message}
	if v.Error.Param != nil {
		e.Param = *v.Error.Param
	}
	if v.Error.Code != nil {
		e.Code = *v.Error.Code
	}
	switch e.Code {
	case errShutdownCut.Code:
		e.Status = errShutdownCut.Status
	case errAbandonedCut.Code:
		e.Status = errAbandonedCut.Status
	}
	return e, true
}

// resume starts request id that continues resumable stream streamID after
// seq after, as create starts one.
func (c *wsConn) resume(ctx context.Context, id, streamID string, after int64) {
	rctx, req, release, ok := c.admit(ctx, id)
	if !ok {
		return
	}
	c.wg.Go(func() {
		w := newWSWriter(c.out, rctx.Done(), id, func() { c.release(id, req) })
		c.serveRequest(rctx, id, req, w, release, func() (*wsRun, *apiError) {
			if e := c.s.checkResumable(rctx, streamID, chunkObjectOfPath(c.path)); e != nil {
				return nil, e
			}
			if l := c.s.logs.lookup(streamID); l != nil {
				// Live here: followed as its starter follows it.
				st := newLogSteps(rctx, l, nil, &wsLogSink{ctx: rctx, w: w}, after, 0, nil)
				st.ender = req
				return &wsRun{steps: st}, nil
			}
			return &wsRun{stream: func() (*Usage, error) {
				return nil, c.followWS(rctx, w, streamID, after)
			}}, nil
		})
	})
}

// chunkObjectOfPath is the object of the chunks POST path streams.
func chunkObjectOfPath(path string) string {
	if path == "/v1/completions" {
		return "text_completion"
	}
	return "chat.completion.chunk"
}

// checkResumable answers whether stream id is a resumable stream of
// object's chunks: nil, or the error to answer.
func (s *Server) checkResumable(ctx context.Context, id, object string) *apiError {
	notFound := &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "stream_not_found",
		Message: fmt.Sprintf("No resumable stream with id '%s'.", clip(id, maxEchoBytes))}
	if s.logs == nil {
		notFound.Message += " This server stores no streams (--responses-store 0)."
		return notFound
	}
	st, err := s.logs.st.GetStream(ctx, id)
	if err != nil {
		if isNotFound(err) {
			return notFound
		}
		s.log.ErrorContext(ctx, "stream store failed", "stream", id, "err", err)
		return storeFailed()
	}
	var rec chatStreamRecord
	if json.Unmarshal(st.Data, &rec) != nil || rec.Object != object {
		return notFound
	}
	return nil
}
