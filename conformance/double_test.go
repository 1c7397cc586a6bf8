package conformance_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"rill/engine"
)

// doubleModel is the model id the engine double serves.
const doubleModel = "rill-double"

// double is an engine that reports whatever Stats the prompt dictates, for
// the specs of usage assembly that no real model can drive (fractional cached
// counts, as some upstream engines report them). The prompt (or the last chat
// message) is a list of key=value words:
//
//	prompt=1000 cached=899.5 completion=3
//
// prompt is Stats.PromptTokens, cached Stats.CachedTokens (a float; absent
// means not measured), completion the tokens each choice emits (default 2).
// It is safe for concurrent use and lives only in the test binary.
type double struct{}

func newDouble() *double { return &double{} }

func (*double) Models() []engine.ModelCard {
	return []engine.ModelCard{{ID: doubleModel, OwnedBy: "rill", Created: 1700000000, ContextLength: 1 << 20,
		Description: "conformance engine double: reports the Stats its prompt dictates", PrefixCache: true}}
}

// doubleScript is the parsed prompt of the double.
type doubleScript struct {
	prompt, completion int
	cached             *float64
}

func parseScript(text string) (doubleScript, error) {
	s := doubleScript{completion: 2}
	for _, word := range strings.Fields(text) {
		k, v, ok := strings.Cut(word, "=")
		if !ok {
			return s, fmt.Errorf("word %q is not key=value", word)
		}
		switch k {
		case "prompt", "completion":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return s, fmt.Errorf("%s=%q: want a count", k, v)
			}
			if k == "prompt" {
				s.prompt = n
			} else {
				s.completion = n
			}
		case "cached":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return s, fmt.Errorf("cached=%q: want a number", v)
			}
			s.cached = &f
		default:
			return s, fmt.Errorf("unknown key %q", k)
		}
	}
	if s.prompt == 0 {
		return s, fmt.Errorf("the script %q sets no prompt=N", text)
	}
	return s, nil
}

func (d *double) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if req.Model != doubleModel {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	text, param := req.Prompt, "prompt"
	if len(req.Messages) > 0 {
		text, param = req.Messages[len(req.Messages)-1].Content, "messages"
	}
	sc, err := parseScript(text)
	if err != nil {
		return nil, engine.Errorf("", param, "engine double: %v", err)
	}
	if req.MaxTokens > 0 {
		sc.completion = min(sc.completion, req.MaxTokens)
	}
	var evs []engine.Event
	for j := range req.Choices() {
		for range sc.completion {
			ev := engine.Event{Choice: j, Text: " tok"}
			if req.Logprobs {
				ev.Logprobs = []engine.TokenLogprob{{Token: " tok", Bytes: []byte(" tok"), Logprob: -0.5}}
			}
			evs = append(evs, ev)
		}
		st := &engine.Stats{PromptTokens: sc.prompt, CompletionTokens: sc.completion}
		if sc.cached != nil {
			c := *sc.cached
			st.CachedTokens = &c
		}
		evs = append(evs, engine.Event{Choice: j, Final: true, FinishReason: engine.FinishLength, Stats: st})
	}
	return &doubleStream{ctx: ctx, events: evs}, nil
}

// doubleStream replays events; it honours ctx as the Stream contract asks.
// Like every engine.Stream it is owned by one goroutine.
type doubleStream struct {
	ctx    context.Context
	events []engine.Event
}

func (s *doubleStream) TryRecv() (engine.Event, bool, error) {
	if err := s.ctx.Err(); err != nil {
		return engine.Event{}, false, err
	}
	if len(s.events) == 0 {
		return engine.Event{}, false, io.EOF
	}
	ev := s.events[0]
	s.events = s.events[1:]
	return ev, true, nil
}

// Ready is always ready: the double has every event at once.
func (s *doubleStream) Ready() <-chan struct{} { return readyNow }

var readyNow = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
