package upstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"rill/engine"
)

// stream turns an upstream's chunks into engine events, pulled one at a
// time with recv, which reads the upstream's body. It is owned by one
// goroutine: the pump that feeds the request's engine.Stream (pump.go).
//
// Text and logprobs are passed on as they arrive. A choice's final event
// waits until the upstream has reported the request's counters (the usage
// chunk that follows the finish reasons), or has ended its stream without
// them; then every choice's final event is sent, in choice order, with the
// Stats of the whole request on choice 0 (see Engine.Generate).
//
// Until the first event is sent, a failed attempt is retried on another
// replica: the client has seen nothing, so nothing is lost. After it, a
// failure ends the stream with an error wrapping engine.ErrUpstream.
type stream struct {
	c *call
	a *attempt
	n int

	queue []engine.Event
	qi    int

	started  bool // an event was queued: no more retries
	finished []bool
	reasons  []engine.FinishReason
	open     int // choices without a finish reason
	usage    *wireUsage
	timings  *wireTimings
	finals   bool // the final events are queued
	// running builds the running Stats of a request that asked for
	// continuous usage; nil otherwise.
	running *running
	// msgs reads the attempt's events when it went to /v1/messages; nil
	// otherwise.
	msgs *messagesDecoder

	t0, first time.Time
	err       error // terminal; io.EOF after the last final event
}

func newStream(c *call, a *attempt, n int) *stream {
	s := &stream{c: c, n: n, finished: make([]bool, n), reasons: make([]engine.FinishReason, n),
		open: n, queue: make([]engine.Event, 0, 4)}
	s.attach(a)
	return s
}

// attach makes a the stream's attempt, reading it from the start: with a
// Messages decoder when it went to /v1/messages, and new running counts.
// A Messages stream counts its running output tokens (one per delta), as
// runningCounted does, and takes the prompt's counts from message_start.
func (s *stream) attach(a *attempt) {
	s.a, s.t0, s.msgs = a, time.Now(), nil
	if a.messages {
		s.msgs = newMessagesDecoder(s.c.e.opts.Kind)
	}
	s.running = nil
	if s.c.continuous {
		s.running = newRunning(s.c.e.opts.Kind, s.n, s.c.predicted)
		if a.messages {
			s.running.source = runningCounted
		}
	}
}

// recv blocks until the next event: io.EOF after the last final event,
// any other error terminal (the replica is released either way).
func (s *stream) recv() (engine.Event, error) {
	for {
		if s.qi < len(s.queue) {
			ev := s.queue[s.qi]
			s.queue[s.qi] = engine.Event{}
			s.qi++
			return ev, nil
		}
		s.queue, s.qi = s.queue[:0], 0
		if s.err != nil {
			return engine.Event{}, s.err
		}
		if s.finals {
			// Every final event is out: the request is complete, whatever
			// the upstream still sends.
			s.a.finish()
			s.err = io.EOF
			continue
		}
		if err := s.step(); err != nil {
			s.a.release()
			s.err = err
		}
	}
}

// prefetch reads until the stream has an event queued (which recv then
// returns first) or fails; the error is the stream's terminal one, io.EOF
// when it ended without any event.
func (s *stream) prefetch() error {
	for s.qi >= len(s.queue) {
		if s.err != nil {
			return s.err
		}
		if s.finals {
			return io.EOF
		}
		if err := s.step(); err != nil {
			s.a.release()
			s.err = err
			return err
		}
	}
	return nil
}

// step reads and handles one upstream event.
func (s *stream) step() error {
	data, err := s.a.next()
	switch {
	case errors.Is(err, io.EOF) && s.open == 0:
		s.queueFinals() // ended without [DONE]: complete all the same
		return nil
	case errors.Is(err, io.EOF):
		return s.broken(errors.New("the stream ended before every choice finished"), false)
	case err != nil:
		return s.broken(err, true)
	case string(data) == "[DONE]":
		if s.open > 0 {
			return s.broken(errors.New("[DONE] before every choice finished"), false)
		}
		s.queueFinals()
		return nil
	}
	var ch wireChunk
	switch {
	case s.msgs != nil:
		err = s.msgs.decode(data, &ch)
	case s.c.responses:
		err = decodeResponseEvent(data, &ch)
	default:
		err = decodeChunk(data, &ch)
	}
	if err != nil {
		return s.broken(fmt.Errorf("unreadable chunk: %v", err), false)
	}
	if len(ch.Error) > 0 && string(ch.Error) != "null" {
		return s.errorEvent(ch.Error)
	}
	if p := ch.Progress; p != nil && s.c.progress && !s.started {
		s.queue = append(s.queue, engine.Event{Progress: &engine.Progress{Total: p.Total, Cached: p.Cache,
			Processed: p.Processed, Elapsed: time.Duration(p.TimeMS) * time.Millisecond}})
	}
	var report *engine.Stats
	if s.running != nil {
		if ch.opening != nil {
			s.running.opening(s.c.e.opts.Kind.stats(ch.opening, nil, s.c.predicted))
		}
		report = s.running.chunk(&ch)
	}
	for i := range ch.Choices {
		c := &ch.Choices[i]
		j := c.Index
		if j < 0 || j >= s.n {
			return s.broken(fmt.Errorf("chunk for choice %d of %d", j, s.n), false)
		}
		if s.finished[j] {
			// tabbyAPI repeats the finish reason on its usage chunk.
			continue
		}
		var text, reasoning string
		switch {
		case c.Delta != nil:
			if c.Delta.Content != nil {
				text = *c.Delta.Content
			}
			reasoning = c.Delta.reasoning()
		case c.Text != nil:
			text = *c.Text
		case c.Message != nil:
			if c.Message.Content != nil {
				text = *c.Message.Content
			}
			reasoning = c.Message.reasoning()
		}
		var calls []engine.ToolCallDelta
		switch {
		case c.Delta != nil && len(c.Delta.ToolCalls) > 0:
			calls = callDeltas(c.Delta.ToolCalls)
		case c.Message != nil:
			calls = callDeltas(c.Message.ToolCalls)
		}
		lps := c.Logprobs.events()
		if text != "" || reasoning != "" || len(lps) > 0 || len(calls) > 0 {
			if !s.started {
				s.started, s.first = true, time.Now()
			}
			ev := engine.Event{Choice: j, Text: text, Reasoning: reasoning, Logprobs: lps, ToolCalls: calls}
			if s.running != nil {
				ev.Stats = s.running.event(j, len(lps), report)
			}
			s.queue = append(s.queue, ev)
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			s.finished[j], s.reasons[j] = true, finishReason(*c.FinishReason)
			s.open--
		}
	}
	if ch.Timings != nil {
		s.timings = ch.Timings
	}
	// A usage that came with choices because rill asked for continuous
	// usage is a running count, not the request's.
	runningUsage := report != nil && s.running.source != runningTimings
	if ch.Usage != nil && !runningUsage {
		s.usage = ch.Usage
		if s.open == 0 {
			// The counters of the finished request: no need to wait for [DONE].
			s.queueFinals()
		}
	}
	return nil
}

// queueFinals queues the final event of every choice.
func (s *stream) queueFinals() {
	st := s.c.e.opts.Kind.stats(s.usage, s.timings, s.c.predicted)
	if st.PromptTime == 0 && st.GenerationTime == 0 && !s.first.IsZero() {
		// Upstreams without timings: what rill saw, time to the first
		// token and the rest.
		st.PromptTime, st.GenerationTime = s.first.Sub(s.t0), time.Since(s.first)
	}
	if s.usage == nil && s.timings == nil {
		s.c.e.log.Warn("upstream sent no usage; counts are zero", slog.String("model", s.c.e.info.ID),
			slog.String("replica", s.a.r.base))
	}
	var perChoice []engine.Stats
	if s.running != nil && s.n > 1 {
		perChoice = s.running.finals(st)
	}
	for j := range s.n {
		ev := engine.Event{Choice: j, Final: true, FinishReason: s.reasons[j]}
		switch {
		case perChoice != nil:
			ev.Stats = &perChoice[j]
		case j == 0:
			ev.Stats = &st
		default:
			ev.Stats = &engine.Stats{PromptTokens: st.PromptTokens}
		}
		s.queue = append(s.queue, ev)
	}
	s.finals = true
}

// broken handles a failed attempt: before the first event it tries another
// replica (and returns nil when one answered); after it, or when none is
// left, it returns the stream's terminal error. network says the failure
// was in reading (the replica may be gone), not in what it sent.
func (s *stream) broken(cause error, network bool) error {
	if err := s.c.ctx.Err(); err != nil {
		return err // the client left; that is all there is to say
	}
	a := s.a
	msg := fmt.Sprintf("replica #%d: %v", a.r.idx, cause)
	if a.idleCause() {
		msg = fmt.Sprintf("replica #%d sent nothing for %s", a.r.idx, s.c.e.opts.IdleTimeout)
	}
	a.release()
	s.c.e.failed(a.r, &failure{msg: msg, down: network})
	if !s.started {
		next, err := s.c.open()
		if err != nil {
			return err
		}
		// Start over: a finish reason without text, or counters, may have
		// come from the failed attempt.
		s.attach(next)
		clear(s.finished)
		s.open, s.usage, s.timings = s.n, nil, nil
		return nil
	}
	return fmt.Errorf("%w: model %q: the stream broke off: %s", engine.ErrUpstream, s.c.e.info.ID, msg)
}

// errorEvent handles an error the upstream sent in its stream: the
// client's fault when it says so (a 4xx code or an invalid-request type),
// else a failure of the upstream, retried while nothing was sent.
func (s *stream) errorEvent(raw json.RawMessage) error {
	var e struct {
		Code any `json:"code"`
	}
	_ = json.Unmarshal(raw, &e)
	we := parseError(append(append([]byte(`{"error":`), raw...), '}'))
	code, _ := e.Code.(float64)
	if (code >= 400 && code < 500) || we.Type == "invalid_request_error" {
		s.a.release()
		return we.requestError()
	}
	return s.broken(fmt.Errorf("error event: %s", we.Message), false)
}
