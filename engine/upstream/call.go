package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"rill/engine"
)

// call is one upstream request (one engine request, or one choice of a
// fanned-out one) across its attempts on replicas. It belongs to one
// goroutine: Generate's, then its stream's.
type call struct {
	e         *Engine
	ctx       context.Context // the client's; never stored beyond the request
	path      string
	body      []byte
	key       uint64
	haveKey   bool
	tried     []bool // by replica index
	predicted bool   // the client sent a prediction
	// continuous: the client asked for running counts (ContinuousUsage).
	continuous bool
	// progress: the request asked for prompt progress and the body asks
	// the upstream for it (return_progress).
	progress bool
	// responses: the upstream speaks the Responses API for this call; its
	// events are read with decodeResponseEvent.
	responses bool
	// msgBody is the request for the upstream's /v1/messages, nil when
	// the call goes to path alone. A replica that has no such route gets
	// path and body instead (see send); the attempt says which it got.
	msgBody []byte
}

// failure is an attempt that failed in a way another replica may not.
type failure struct {
	msg string
	// down: the replica looks unreachable or broken; take it out of
	// rotation until a health check passes.
	down bool
	// overloaded: the replica said it is too busy (429, 503).
	overloaded bool
}

func (f *failure) Error() string { return f.msg }

// errIdle is the cause of an attempt cancelled for silence.
var errIdle = errors.New("idle timeout")

// open sends the request to replicas until one answers with a stream, and
// returns that attempt. A refusal that is the client's fault ends the search
// at once (*engine.RequestError); when every replica failed, the error wraps
// engine.ErrOverloaded if one said it was busy, else engine.ErrUpstream.
func (c *call) open() (*attempt, error) {
	var last error
	overloaded := false
	for {
		r := pick(c.e.replicas, c.tried, c.key, c.haveKey, int64(c.e.opts.MaxImbalance), c.e.rot.Add(1))
		if r == nil {
			break
		}
		c.tried[r.idx] = true
		a, err := c.send(r)
		if err == nil {
			return a, nil
		}
		if c.ctx.Err() != nil {
			return nil, c.ctx.Err()
		}
		var f *failure
		if !errors.As(err, &f) {
			return nil, err // the client's fault: every replica would refuse it
		}
		c.e.failed(r, f)
		overloaded = overloaded || f.overloaded
		last = err
	}
	if last == nil {
		last = errors.New("every replica was tried")
	}
	sentinel := engine.ErrUpstream
	if overloaded {
		sentinel = engine.ErrOverloaded
	}
	return nil, fmt.Errorf("%w: model %q: no replica could serve the request; last error: %v", sentinel, c.e.info.ID, last)
}

// failed records a failed attempt on r: it is logged, and r is marked down
// when the failure says so.
func (e *Engine) failed(r *replica, f *failure) {
	if f.down && r.markDown(f.msg) {
		e.log.Warn("upstream replica down", slog.String("model", e.info.ID),
			slog.String("replica", r.base), slog.String("err", f.msg))
		return
	}
	e.log.Warn("upstream replica failed a request", slog.String("model", e.info.ID),
		slog.String("replica", r.base), slog.String("err", f.msg))
}

// send makes one attempt on r: at /v1/messages when the call has a
// Messages body and r has not shown it lacks the route, else at the
// call's path. A 404 there sends the call's path and body at once, and
// unless that is a 404 too (a model r does not serve, not a route it
// lacks) r gets chat completions for Messages requests from then on. On
// success the attempt holds r's in-flight count and the response until
// its release.
func (c *call) send(r *replica) (*attempt, error) {
	if c.msgBody == nil || r.noMessages.Load() {
		a, _, err := c.post(r, c.path, c.body)
		return a, err
	}
	a, status, err := c.post(r, pathMessages, c.msgBody)
	if status != http.StatusNotFound {
		if a != nil {
			a.messages = true
		}
		return a, err
	}
	a, status, err = c.post(r, c.path, c.body)
	if status != http.StatusNotFound && c.ctx.Err() == nil && !r.noMessages.Swap(true) {
		c.e.log.Info("upstream replica has no /v1/messages; Messages requests go to chat completions there",
			slog.String("model", c.e.info.ID), slog.String("replica", r.base))
	}
	return a, err
}

// post sends body to r's path and returns the attempt, or the error with
// the status that r answered (0 when it answered none).
func (c *call) post(r *replica, path string, body []byte) (*attempt, int, error) {
	actx, cancel := context.WithCancelCause(c.ctx)
	req, err := http.NewRequestWithContext(actx, http.MethodPost, r.base+path, bytes.NewReader(body))
	if err != nil {
		cancel(nil)
		return nil, 0, &failure{msg: err.Error()}
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	if r.key != "" {
		h.Set("Authorization", "Bearer "+r.key)
	}
	// Lets the transport resend the request once on a reused keep-alive
	// connection that the server had already closed (llama.cpp's server
	// drops them after SSE responses); an empty value is not sent.
	h["Idempotency-Key"] = nil
	span := startCallSpan(c.ctx, r, c.e.info.ID, path, h)

	r.inflight.Add(1)
	resp, err := c.e.client.Do(req)
	if err != nil {
		r.inflight.Add(-1)
		cancel(nil)
		// The message reaches clients: name the replica by its place in
		// the configuration, not by its (internal) address.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		f := &failure{msg: fmt.Sprintf("replica #%d: %v", r.idx, err), down: true}
		endCallSpan(span, 0, f)
		return nil, 0, f
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		r.inflight.Add(-1)
		cancel(nil)
		err := refusal(r, resp.StatusCode, msg)
		endCallSpan(span, resp.StatusCode, err)
		return nil, resp.StatusCode, err
	}
	a := &attempt{r: r, ctx: actx, cancel: cancel, body: resp.Body, idle: c.e.opts.IdleTimeout, span: span}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "application/json" {
		a.whole = true // the upstream ignored "stream": a complete response
	} else {
		a.rd = newSSEReader(resp.Body)
	}
	a.timer = time.AfterFunc(a.idle, func() { cancel(errIdle) })
	// A request cancelled by its client frees its replica slot at once, not
	// when (or if) its consumer calls Recv again.
	a.unwatch = context.AfterFunc(c.ctx, a.release)
	return a, http.StatusOK, nil
}

// refusal classifies a non-200 answer. 400, 413 and 422 are the client's
// fault: its request reaches every replica the same way. The rest may be
// one replica's trouble: 502, 503 and 504 take it out of rotation; 429 and
// 503 say it is busy.
func refusal(r *replica, status int, body []byte) error {
	we := parseError(body)
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return we.requestError()
	}
	return &failure{
		msg:        fmt.Sprintf("replica #%d answered %d: %s", r.idx, status, we.Message),
		down:       status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout,
		overloaded: status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable,
	}
}

// attempt is one upstream response being read. It is owned by its stream.
type attempt struct {
	r      *replica
	ctx    context.Context
	cancel context.CancelCauseFunc
	body   io.ReadCloser
	rd     *sseReader // nil for a whole JSON response
	whole  bool
	step   int // of a whole response: 0 body, 1 [DONE], then EOF
	// messages: the body is a Messages API answer (call.msgBody went).
	messages bool
	idle     time.Duration
	timer    *time.Timer

	unwatch     func() bool // stops the release on the request's cancellation
	releaseOnce sync.Once
	span        trace.Span // the call's, ended on release
}

var doneEvent = []byte("[DONE]")

// next returns the data of the next event. Each successful read restarts
// the idle timer.
func (a *attempt) next() ([]byte, error) {
	if a.whole {
		a.step++
		switch a.step {
		case 1:
			b, err := io.ReadAll(io.LimitReader(a.body, maxEventBytes))
			if err != nil {
				return nil, err
			}
			a.timer.Reset(a.idle)
			return b, nil
		case 2:
			return doneEvent, nil
		}
		return nil, io.EOF
	}
	data, err := a.rd.next()
	if err == nil {
		a.timer.Reset(a.idle)
	}
	return data, err
}

// idleCause reports whether the attempt was cut for silence.
func (a *attempt) idleCause() bool { return errors.Is(context.Cause(a.ctx), errIdle) }

// finish reads what is left of a completed response (the end of the chunked
// body, so that the connection can be reused), for at most a second, then
// releases the attempt.
func (a *attempt) finish() {
	a.timer.Reset(time.Second)
	_, _ = io.Copy(io.Discard, io.LimitReader(a.body, 64<<10))
	a.release()
}

// release ends the attempt: its timer, context and body, and its place in
// the replica's in-flight count. It is idempotent.
func (a *attempt) release() {
	a.releaseOnce.Do(func() {
		a.unwatch()
		a.timer.Stop()
		a.cancel(nil)
		a.body.Close()
		a.r.inflight.Add(-1)
		endCallSpan(a.span, http.StatusOK, nil)
	})
}
