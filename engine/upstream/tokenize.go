package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"rill/engine"
)

// Tokenize and Detokenize pass /tokenize and /detokenize to the upstream
// where it has them: vLLM, SGLang and rill in vLLM's shape; llama.cpp in
// its own (/tokenize {"content"} -> {"tokens"}, /detokenize {"tokens"} ->
// {"content"}, and /apply-template {"messages"} -> {"prompt"} to render a
// chat first, whose prompt it then tokenises as its chat completions do:
// special tokens added and parsed). Other kinds have none
// (engine.ErrUnsupported).

var _ engine.Tokenizer = (*Engine)(nil)

// Tokenize implements engine.Tokenizer.
func (e *Engine) Tokenize(ctx context.Context, req *engine.TokenizeRequest) (*engine.TokenizeResult, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	switch e.opts.Kind {
	case VLLM, SGLang, Rill:
		body := map[string]any{"model": e.opts.UpstreamModel}
		if req.Messages != nil {
			body["messages"] = wireMessages(req.Messages)
			if len(req.Tools) > 0 {
				body["tools"] = wireTools(req.Tools)
			}
			if len(req.ChatTemplateKwargs) > 0 {
				body["chat_template_kwargs"] = req.ChatTemplateKwargs
			}
			if req.AddGenerationPrompt != nil {
				body["add_generation_prompt"] = *req.AddGenerationPrompt
			}
		} else {
			body["prompt"] = req.Prompt
		}
		if req.AddSpecialTokens != nil {
			body["add_special_tokens"] = *req.AddSpecialTokens
		}
		var out struct {
			Tokens      []int `json:"tokens"`
			MaxModelLen int   `json:"max_model_len"`
		}
		if err := e.postJSON(ctx, "/tokenize", body, &out); err != nil {
			return nil, err
		}
		if out.MaxModelLen == 0 {
			out.MaxModelLen = e.info.ContextLength
		}
		return &engine.TokenizeResult{Tokens: nonNil(out.Tokens), MaxModelLen: out.MaxModelLen}, nil
	case LlamaCpp:
		prompt := req.Prompt
		if req.Messages != nil {
			body := map[string]any{"messages": wireMessages(req.Messages)}
			if req.AddGenerationPrompt != nil {
				body["add_generation_prompt"] = *req.AddGenerationPrompt
			}
			if len(req.Tools) > 0 {
				body["tools"] = wireTools(req.Tools)
			}
			if len(req.ChatTemplateKwargs) > 0 {
				body["chat_template_kwargs"] = req.ChatTemplateKwargs
			}
			var rendered struct {
				Prompt string `json:"prompt"`
			}
			if err := e.postJSON(ctx, "/apply-template", body, &rendered); err != nil {
				return nil, err
			}
			prompt = rendered.Prompt
		}
		addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
		var out struct {
			Tokens []int `json:"tokens"`
		}
		if err := e.postJSON(ctx, "/tokenize", map[string]any{"content": prompt, "add_special": addSpecial, "parse_special": true}, &out); err != nil {
			return nil, err
		}
		return &engine.TokenizeResult{Tokens: nonNil(out.Tokens), MaxModelLen: e.info.ContextLength}, nil
	}
	return nil, fmt.Errorf("%w: %s upstreams have no tokenizer endpoint", engine.ErrUnsupported, e.opts.Kind)
}

// Detokenize implements engine.Tokenizer.
func (e *Engine) Detokenize(ctx context.Context, req *engine.DetokenizeRequest) (*engine.DetokenizeResult, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q", engine.ErrUnknownModel, req.Model)
	}
	tokens := nonNil(req.Tokens)
	switch e.opts.Kind {
	case VLLM, SGLang, Rill:
		var out struct {
			Prompt string `json:"prompt"`
		}
		if err := e.postJSON(ctx, "/detokenize", map[string]any{"model": e.opts.UpstreamModel, "tokens": tokens}, &out); err != nil {
			return nil, err
		}
		return &engine.DetokenizeResult{Prompt: out.Prompt}, nil
	case LlamaCpp:
		var out struct {
			Content string `json:"content"`
		}
		if err := e.postJSON(ctx, "/detokenize", map[string]any{"tokens": tokens}, &out); err != nil {
			return nil, err
		}
		return &engine.DetokenizeResult{Prompt: out.Content}, nil
	}
	return nil, fmt.Errorf("%w: %s upstreams have no detokenizer endpoint", engine.ErrUnsupported, e.opts.Kind)
}

func nonNil(ids []int) []int {
	if ids == nil {
		return []int{}
	}
	return ids
}

// wireTools writes tools as OpenAI's tool objects.
func wireTools(tools []engine.Tool) []map[string]any {
	out := make([]map[string]any, len(tools))
	for i, t := range tools {
		f := map[string]any{"name": t.Name}
		if t.Description != "" {
			f["description"] = t.Description
		}
		if len(t.Parameters) > 0 {
			f["parameters"] = t.Parameters
		}
		out[i] = map[string]any{"type": "function", "function": f}
	}
	return out
}

// maxAnswerBytes bounds the answer of a tokenizer endpoint that rill reads
// (a prompt's token ids as JSON, or its text).
const maxAnswerBytes = 64 << 20

// postJSON posts body to path on a replica and decodes a 200 answer into
// out. A replica that cannot be reached or answers with a server error is
// skipped for the next; a 404 or 405 means the upstream has no such
// endpoint (engine.ErrUnsupported); a 400, 413 or 422 is the client's
// fault (*engine.RequestError).
func (e *Engine) postJSON(ctx context.Context, path string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return engine.Errorf("", "", "the request cannot be encoded for the upstream: %v", err)
	}
	tried := make([]bool, len(e.replicas))
	var last error
	for {
		r := pick(e.replicas, tried, 0, false, 0, e.rot.Add(1))
		if r == nil {
			break
		}
		tried[r.idx] = true
		err := e.postOnce(ctx, r, path, data, out)
		var f *failure
		if err == nil || !errors.As(err, &f) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e.failed(r, f)
		last = err
	}
	return fmt.Errorf("%w: model %q: no replica answered %s; last error: %v", engine.ErrUpstream, e.info.ID, path, last)
}

// postOnce makes one attempt of postJSON on r.
func (e *Engine) postOnce(ctx context.Context, r *replica, path string, data []byte, out any) (err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+path, bytes.NewReader(data))
	if err != nil {
		return &failure{msg: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	// As in call.send: the transport may resend the request once on a new
	// connection when llama.cpp's server dropped the idle one it reused.
	req.Header["Idempotency-Key"] = nil
	span := startCallSpan(ctx, r, e.info.ID, path, req.Header)
	status := 0
	defer func() { endCallSpan(span, status, err) }()
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	resp, err := e.client.Do(req)
	if err != nil {
		return &failure{msg: fmt.Sprintf("replica #%d: %v", r.idx, err), down: true}
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return &failure{msg: fmt.Sprintf("replica #%d: %v", r.idx, err), down: true}
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return fmt.Errorf("%w: the upstream answered %s with %d", engine.ErrUnsupported, path, resp.StatusCode)
	default:
		return refusal(r, resp.StatusCode, answer)
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return &failure{msg: fmt.Sprintf("replica #%d: unreadable answer to %s: %v", r.idx, path, err)}
	}
	return nil
}
