package native

import (
	"context"
	"fmt"
	"strings"

	"rill/engine"
	"rill/engine/model"
	"rill/engine/tokenizer"
)

var _ engine.Reranker = (*Engine)(nil)

// rerankTemplateKey holds a reranker's prompt, {query} and {document}
// standing for the pair (llama.cpp's converter writes it for
// Qwen3-Reranker).
const rerankTemplateKey = "tokenizer.chat_template.rerank"

// Rerank implements engine.Reranker for a decoder whose GGUF pools by rank
// (Qwen3-Reranker as llama.cpp converts it). Each document makes a prompt
// of its own: the file's rerank template with the query and the document
// put in, or, without one, llama.cpp's default pairing (BOS if the
// vocabulary adds it, the query, EOS if it adds EOS, SEP if it adds SEP,
// the document, EOS if it adds EOS). The prompts run through the loop as
// Embed's inputs do, and a document's score is the first output of the
// classification head at the prompt's last token: for a qwen3 reranker
// P("yes"), between 0 and 1, as llama.cpp's server returns it. A prompt
// longer than the context is refused.
func (e *Engine) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q (this server has %q)", engine.ErrUnknownModel, req.Model, e.info.ID)
	}
	if p := e.model.Config.Pooling; p != model.PoolRank {
		return nil, fmt.Errorf("%w: model %q is not a reranker (its GGUF pools by %s, not rank)", engine.ErrUnsupported, e.info.ID, p)
	}
	if _, ok := e.runner.(Pooler); !ok || e.window != nil {
		return nil, fmt.Errorf("%w: the backend of model %q cannot pool hidden states", engine.ErrUnsupported, e.info.ID)
	}
	if len(req.Documents) == 0 {
		return nil, engine.Errorf("invalid_value", "documents", "documents must not be empty")
	}
	tmpl, _ := e.model.File.Metadata.String(rerankTemplateKey)
	seqs := make([][]int32, len(req.Documents))
	total := 0
	for i, doc := range req.Documents {
		ids, err := e.rerankTokens(ctx, tmpl, req.Query, doc)
		if err != nil {
			return nil, err
		}
		if len(ids) > e.ctxLen {
			return nil, engine.Errorf(engine.CodeContextLengthExceeded, "documents", "the query with document %d has %d tokens, more than the model's context of %d", i, len(ids), e.ctxLen)
		}
		seqs[i], total = ids, total+len(ids)
	}
	vs, err := e.pool(ctx, seqs, model.PoolRank)
	if err != nil {
		return nil, err
	}
	scores := make([]float32, len(vs))
	for i, v := range vs {
		scores[i] = v[0]
	}
	return &engine.RerankResult{Scores: scores, PromptTokens: total}, nil
}

// rerankTokens returns the prompt of one query and document pair. With a
// template the prompt is tokenised whole, as llama.cpp does (so merges
// across the template's edges are the model's), but the query's and the
// document's bytes stay text: a special token's text in them is not that
// token (llama.cpp parses it), and a "{document}" in the query is not
// replaced (llama.cpp replaces it), since the template is filled in one
// pass.
func (e *Engine) rerankTokens(ctx context.Context, tmpl, query, doc string) ([]int32, error) {
	var ids []int
	var err error
	if tmpl != "" {
		text, plain := fillRerank(tmpl, query, doc)
		ids, err = e.tok.EncodeContext(ctx, text, tokenizer.EncodeOptions{ParseSpecial: true, Plain: plain})
	} else {
		ids, err = e.defaultPair(ctx, query, doc)
	}
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out, nil
}

// defaultPair is llama.cpp's pairing for a reranker without a template.
func (e *Engine) defaultPair(ctx context.Context, query, doc string) ([]int, error) {
	q, err := e.tok.EncodeContext(ctx, query, tokenizer.EncodeOptions{})
	if err != nil {
		return nil, err
	}
	d, err := e.tok.EncodeContext(ctx, doc, tokenizer.EncodeOptions{})
	if err != nil {
		return nil, err
	}
	v := e.tok.Vocab()
	eos := v.EOS
	if eos < 0 {
		eos = v.SEP
	}
	var out []int
	if v.AddBOS && v.BOS >= 0 {
		out = append(out, v.BOS)
	}
	out = append(out, q...)
	if v.AddEOS && eos >= 0 {
		out = append(out, eos)
	}
	if v.AddSEP && v.SEP >= 0 {
		out = append(out, v.SEP)
	}
	out = append(out, d...)
	if v.AddEOS && eos >= 0 {
		out = append(out, eos)
	}
	return out, nil
}

// fillRerank puts query and doc where tmpl has {query} and {document}, in
// one pass, and returns the text and the byte ranges they fill, in order.
func fillRerank(tmpl, query, doc string) (string, []tokenizer.Span) {
	var b strings.Builder
	var spans []tokenizer.Span
	for {
		qi, di := strings.Index(tmpl, "{query}"), strings.Index(tmpl, "{document}")
		if qi < 0 && di < 0 {
			b.WriteString(tmpl)
			return b.String(), spans
		}
		at, key, val := qi, "{query}", query
		if qi < 0 || di >= 0 && di < qi {
			at, key, val = di, "{document}", doc
		}
		b.WriteString(tmpl[:at])
		if val != "" {
			spans = append(spans, tokenizer.Span{Start: b.Len(), End: b.Len() + len(val)})
		}
		b.WriteString(val)
		tmpl = tmpl[at+len(key):]
	}
}
