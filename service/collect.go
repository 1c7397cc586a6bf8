package service

import (
	"context"

	"rill/engine"
)

// choiceOutput is what one choice of a non-streamed generation produced.
type choiceOutput struct {
	text      []byte
	reasoning []byte
	logprobs  []engine.TokenLogprob
	calls     []callOutput
	final     engine.Event // the final event, for its FinishReason
}

// collect runs g to its end and returns the complete response body
// (chat.completion or text_completion) and its usage.
func (g *generation) collect(ctx context.Context) ([]byte, *Usage, error) {
	out := make([]choiceOutput, g.choices())
	stats, err := g.run(ctx, 0, func(i int, ev *engine.Event) error {
		o := &out[i]
		o.text = append(o.text, ev.Text...)
		o.reasoning = append(o.reasoning, ev.Reasoning...)
		o.calls = addCalls(o.calls, ev.ToolCalls)
		if g.logprobs {
			o.logprobs = append(o.logprobs, ev.Logprobs...)
		}
		if ev.Final {
			o.final = *ev
		}
		return nil
	}, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	u := AssembleUsage(stats)
	g.obs.finish(&u)
	var t *Timings
	if g.timings {
		at := AssembleTimings(stats, &u)
		t = &at
	}
	return g.appendResponse(make([]byte, 0, 512), out, &u, t), &u, nil
}

// appendResponse encodes the non-streamed response of g, with the
// timings t when the client asked for them (nil otherwise).
func (g *generation) appendResponse(b []byte, out []choiceOutput, u *Usage, t *Timings) []byte {
	if g.kind == kindCompletion {
		b = appendHeader(b, g, "text_completion")
		for i := range out {
			o := &out[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"text":`...)
			b = appendString(b, string(o.text))
			b = append(b, `,"index":`...)
			b = appendInt(b, i)
			b = append(b, `,"logprobs":`...)
			if g.logprobs {
				runes := 0
				b = appendLegacyLogprobs(b, o.logprobs, &runes)
			} else {
				b = append(b, "null"...)
			}
			b = append(b, `,"finish_reason":`...)
			b = appendFinish(b, &o.final)
			b = append(b, '}')
		}
	} else {
		b = appendHeader(b, g, "chat.completion")
		for i := range out {
			o := &out[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"index":`...)
			b = appendInt(b, i)
			b = append(b, `,"message":{"role":"assistant","content":`...)
			if len(o.text) == 0 && len(o.calls) > 0 {
				b = append(b, "null"...) // a reply that only calls tools, as OpenAI writes it
			} else {
				b = appendString(b, string(o.text))
			}
			if len(o.reasoning) > 0 {
				b = append(b, `,"reasoning_content":`...)
				b = appendString(b, string(o.reasoning))
			}
			b = append(b, `,"refusal":null`...)
			if len(o.calls) > 0 {
				b = append(b, ',')
				b = appendToolCalls(b, o.calls)
			}
			b = append(b, `},"logprobs":`...)
			if g.logprobs {
				b = appendChatLogprobs(b, o.logprobs)
			} else {
				b = append(b, "null"...)
			}
			b = append(b, `,"finish_reason":`...)
			b = appendFinish(b, &o.final)
			b = append(b, '}')
		}
	}
	b = append(b, `],"usage":`...)
	b = u.AppendJSON(b)
	if t != nil {
		b = append(b, `,"timings":`...)
		b = t.AppendJSON(b)
	}
	return append(b, "}\n"...)
}
