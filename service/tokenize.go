package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"rill/engine"
)

// POST /tokenize and POST /detokenize, in vLLM's shape:
//
//	{"model", "prompt" | "messages", "add_special_tokens"} -> {"count", "max_model_len", "tokens"}
//	{"model", "tokens"} -> {"prompt"}
//
// For messages the tokens are the prompt a chat completion of them runs,
// so count is that request's prompt_tokens. The engine of the model must
// implement engine.Tokenizer.

// tokenizeRequest is the body of POST /tokenize.
type tokenizeRequest struct {
	Model               string                     `json:"model"`
	Prompt              *string                    `json:"prompt"`
	Messages            []chatMessage              `json:"messages"`
	AddSpecialTokens    *bool                      `json:"add_special_tokens"`
	AddGenerationPrompt *bool                      `json:"add_generation_prompt"`
	Tools               []tokenizeTool             `json:"tools"`
	ChatTemplateKwargs  map[string]json.RawMessage `json:"chat_template_kwargs"`
}

// tokenizeTool is a tool of a tokenized chat, as the chat request has it.
type tokenizeTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// detokenizeRequest is the body of POST /detokenize.
type detokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

// tokenizeConvert converts a /tokenize body into the engine's request.
func tokenizeConvert(r *tokenizeRequest) (*engine.TokenizeRequest, *apiError) {
	req := &engine.TokenizeRequest{Model: r.Model, AddSpecialTokens: r.AddSpecialTokens}
	switch {
	case r.Prompt != nil && r.Messages != nil:
		return nil, invalid("messages", "invalid_value", "Send either 'prompt' or 'messages', not both.")
	case r.Prompt != nil:
		if r.Tools != nil || r.ChatTemplateKwargs != nil || r.AddGenerationPrompt != nil {
			return nil, invalid("prompt", "invalid_value", "'tools', 'chat_template_kwargs' and 'add_generation_prompt' apply to 'messages' only.")
		}
		req.Prompt = *r.Prompt
	case r.Messages != nil:
		msgs, e := chatMessages(r.Messages)
		if e != nil {
			return nil, e
		}
		req.Messages = msgs
		req.ChatTemplateKwargs = templateKwargs(r.ChatTemplateKwargs)
		req.AddGenerationPrompt = r.AddGenerationPrompt
		for i, t := range r.Tools {
			if t.Type != "function" {
				return nil, unsupported(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("A tool of type '%s'", t.Type))
			}
			req.Tools = append(req.Tools, engine.Tool{Name: t.Function.Name, Description: t.Function.Description,
				Parameters: t.Function.Parameters, Strict: t.Function.Strict != nil && *t.Function.Strict})
		}
	default:
		return nil, invalid("prompt", "missing_required_parameter", "Missing required parameter: 'prompt' or 'messages'.")
	}
	return req, nil
}

// tokenizer returns the Tokenizer of the server's engine, or the error
// that says there is none.
func (s *Server) tokenizer(model string) (engine.Tokenizer, *apiError) {
	if t, ok := s.engine.(engine.Tokenizer); ok {
		return t, nil
	}
	return nil, tokenizeError(engine.ErrUnsupported, model)
}

// tokenizeError maps an error of engine.Tokenizer to the wire.
func tokenizeError(err error, model string) *apiError {
	if errors.Is(err, engine.ErrUnsupported) {
		return invalid("model", "unsupported_model",
			"The model '%s' cannot tokenize here: its engine has no tokenizer endpoint.", model)
	}
	return fromEngine(err, model)
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	var body tokenizeRequest
	if e := s.readValidated(w, r, &body); e != nil {
		s.fail(w, r, info, e)
		return
	}
	info.model = body.Model
	req, e := tokenizeConvert(&body)
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	t, e := s.tokenizer(body.Model)
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	res, err := t.Tokenize(r.Context(), req)
	if err != nil {
		s.fail(w, r, info, tokenizeError(err, body.Model))
		return
	}
	b := append(make([]byte, 0, 64+8*len(res.Tokens)), `{"count":`...)
	b = appendInt(b, len(res.Tokens))
	b = append(b, `,"max_model_len":`...)
	b = appendInt(b, res.MaxModelLen)
	b = append(b, `,"tokens":[`...)
	for i, id := range res.Tokens {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, id)
	}
	writeJSON(w, r, append(b, "]}\n"...))
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request, info *requestInfo) {
	var body detokenizeRequest
	if e := s.readValidated(w, r, &body); e != nil {
		s.fail(w, r, info, e)
		return
	}
	info.model = body.Model
	t, e := s.tokenizer(body.Model)
	if e != nil {
		s.fail(w, r, info, e)
		return
	}
	res, err := t.Detokenize(r.Context(), &engine.DetokenizeRequest{Model: body.Model, Tokens: body.Tokens})
	if err != nil {
		s.fail(w, r, info, tokenizeError(err, body.Model))
		return
	}
	b := append(make([]byte, 0, 16+len(res.Prompt)), `{"prompt":`...)
	b = appendString(b, res.Prompt)
	writeJSON(w, r, append(b, "}\n"...))
}

// readValidated reads r's body, validates it against the OpenAPI schema of
// its path and decodes it into v.
func (s *Server) readValidated(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body, e := s.readBody(w, r)
	if e != nil {
		return e
	}
	if err := s.validator.ValidateBody(r.Context(), http.MethodPost, r.URL.Path, body); err != nil {
		return fromValidation(err)
	}
	return decodeBody(body, v)
}
