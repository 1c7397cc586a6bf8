package native

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"

	"rill/engine"
	"rill/engine/kvcache"
	"rill/engine/model"
)

var _ engine.Embedder = (*Engine)(nil)

// Pooler is a Runner that can end a pass in pooled hidden states rather
// than logits (model.Runner.Pool): what an embedding model needs of its
// backend. Runners without it serve no embeddings.
type Pooler interface {
	// Pool is model.Runner.Pool over the runner's KV cache: one vector of
	// Model.PoolWidth(how) floats per sequence of b (Embd, or the
	// classification head's outputs for rank), owned by the runner until
	// its next call.
	Pool(ctx context.Context, b *model.Batch, how model.Pooling) ([]float32, error)
}

// embedJob is an Embed or Rerank call's work for the loop: its inputs'
// tokens, how to pool them, and where the loop answers.
type embedJob struct {
	stop   <-chan struct{} // the caller's context's Done: it left
	inputs [][]int32
	how    model.Pooling    // the file's: mean, cls, last, or rank (Rerank)
	done   chan embedAnswer // cap 1: the loop never waits for the caller
}

type embedAnswer struct {
	vectors [][]float32
	err     error
}

// Embed implements engine.Embedder for a model whose GGUF names a pooling
// (mean, cls or last): inputs are tokenised on the caller's goroutine as
// a completion's prompt is, then run by the loop between its steps, packed
// into passes of at most MaxBatchTokens tokens, each input a sequence of
// its own whose KV blocks are freed (never cached) when it is pooled.
// Vectors are L2-normalised unless req.Raw. A model has no Matryoshka
// training that GGUF records, so Dimensions other than the model's own
// size are refused, as vLLM refuses them for models not marked so.
func (e *Engine) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	if req.Model != e.info.ID {
		return nil, fmt.Errorf("%w: %q (this server has %q)", engine.ErrUnknownModel, req.Model, e.info.ID)
	}
	c := &e.model.Config
	switch c.Pooling {
	case model.PoolMean, model.PoolCLS, model.PoolLast:
	case model.PoolNone:
		return nil, fmt.Errorf("%w: model %q is not an embedding model (its GGUF has no %s.pooling_type)", engine.ErrUnsupported, e.info.ID, c.Arch)
	default:
		return nil, fmt.Errorf("%w: model %q pools by %s, which embeddings do not support", engine.ErrUnsupported, e.info.ID, c.Pooling)
	}
	if _, ok := e.runner.(Pooler); !ok || e.window != nil {
		return nil, fmt.Errorf("%w: the backend of model %q cannot pool hidden states", engine.ErrUnsupported, e.info.ID)
	}
	if len(req.Inputs) == 0 {
		return nil, engine.Errorf("invalid_value", "input", "input must not be empty")
	}
	if req.Dimensions < 0 || req.Dimensions > 0 && req.Dimensions != c.Embd {
		return nil, engine.Errorf("invalid_value", "dimensions", "model %q does not support Matryoshka dimensions: dimensions must be %d, its embedding size, or omitted", e.info.ID, c.Embd)
	}
	inputs, total, err := e.embedTokens(ctx, req)
	if err != nil {
		return nil, err
	}
	vectors, err := e.pool(ctx, inputs, c.Pooling)
	if err != nil {
		return nil, err
	}
	if !req.Raw {
		for _, v := range vectors {
			normalize(v)
		}
	}
	return &engine.EmbedResult{Vectors: vectors, PromptTokens: total}, nil
}

// pool has the loop pool inputs by how and waits for its answer.
func (e *Engine) pool(ctx context.Context, inputs [][]int32, how model.Pooling) ([][]float32, error) {
	job := &embedJob{stop: ctx.Done(), inputs: inputs, how: how, done: make(chan embedAnswer, 1)}
	select {
	case e.embeds <- job:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.quit:
		return nil, ErrClosed
	case <-e.done:
		return nil, ErrClosed
	}
	var ans embedAnswer
	select {
	case ans = <-job.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.done:
		return nil, ErrClosed
	}
	return ans.vectors, ans.err
}

// embedTokens tokenises req's inputs and applies its truncation; it
// returns them and their total length.
func (e *Engine) embedTokens(ctx context.Context, req *engine.EmbedRequest) ([][]int32, int, error) {
	limit := e.ctxLen
	switch {
	case req.Truncate > e.ctxLen:
		return nil, 0, engine.Errorf("invalid_value", "truncate_prompt_tokens", "truncate_prompt_tokens %d exceeds the model's context of %d tokens", req.Truncate, e.ctxLen)
	case req.Truncate > 0:
		limit = req.Truncate
	case req.Truncate < -1:
		return nil, 0, engine.Errorf("invalid_value", "truncate_prompt_tokens", "truncate_prompt_tokens must be -1, 0 or positive")
	}
	out := make([][]int32, len(req.Inputs))
	total := 0
	for i, in := range req.Inputs {
		ids := in.Tokens
		if ids == nil {
			var err error
			if ids, err = e.tok.EncodeContext(ctx, in.Text, encodeWithBOS); err != nil {
				return nil, 0, err
			}
		}
		if len(ids) == 0 {
			return nil, 0, engine.Errorf("invalid_value", "input", "input %d has no tokens", i)
		}
		if len(ids) > limit {
			if req.Truncate == 0 {
				return nil, 0, engine.Errorf("context_length_exceeded", "input", "input %d has %d tokens, more than the model's context of %d; shorten it or set truncate_prompt_tokens", i, len(ids), e.ctxLen)
			}
			ids = ids[len(ids)-limit:] // vLLM keeps the last tokens
		}
		toks := make([]int32, len(ids))
		for j, id := range ids {
			if !e.tok.Valid(id) {
				return nil, 0, engine.Errorf("invalid_value", "input", "token %d of input %d is outside the vocabulary of %d tokens", id, i, e.tok.Size())
			}
			toks[j] = int32(id)
		}
		out[i], total = toks, total+len(toks)
	}
	return out, total, nil
}

// normalize scales v to unit Euclidean length (a zero vector stays zero).
func normalize(v []float32) {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
}

// runEmbed answers job on the loop's goroutine (ctx is Run's). A panic
// fails the job alone: it touched no request's state.
func (e *Engine) runEmbed(ctx context.Context, job *embedJob) {
	defer func() {
		if v := recover(); v != nil {
			e.log.Error("embedding pass panicked", slog.String("model", e.info.ID), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			job.done <- embedAnswer{err: fmt.Errorf("%w: %v", errInternal, v)}
		}
	}()
	vs, err := e.embed(ctx, job)
	job.done <- embedAnswer{vectors: vs, err: err}
}

// embedSeq is one input in flight: its blocks and how far it has run.
type embedSeq struct {
	idx  int // the input's index
	kv   kvcache.Seq
	done int // tokens already run
	step int // tokens in the pass being run
}

// embed runs job's inputs through the pooling pass. Inputs are taken in
// order; each pass fills the batch budget with the next tokens of the
// inputs in flight, starting new ones while the budget and free blocks
// allow. An input longer than the budget runs over several passes, its
// pooled parts combined as model.Runner.Pool describes.
func (e *Engine) embed(ctx context.Context, job *embedJob) ([][]float32, error) {
	how := job.how
	E := e.model.PoolWidth(how)
	pooler := e.runner.(Pooler)
	budget := e.opts.MaxBatchTokens
	out := make([][]float32, len(job.inputs))
	var live []*embedSeq
	defer func() {
		for _, s := range live {
			e.cache.Free(&s.kv)
		}
	}()
	next := 0
	var b model.Batch
	for next < len(job.inputs) || len(live) > 0 {
		select {
		case <-job.stop:
			return nil, context.Canceled // the caller is gone; it reads no answer
		default:
		}
		// Admit inputs whose whole length has blocks.
		for next < len(job.inputs) {
			s := &embedSeq{idx: next}
			if err := e.cache.Reserve(&s.kv, len(job.inputs[next])); err != nil {
				if errors.Is(err, kvcache.ErrNoBlocks) && len(live) > 0 {
					break // wait for the inputs in flight to free theirs
				}
				return nil, fmt.Errorf("%w: the KV cache has no room for input %d (%d tokens)", engine.ErrOverloaded, next, len(job.inputs[next]))
			}
			live = append(live, s)
			next++
			if len(live) >= budget {
				break
			}
		}
		b.Reset()
		used := 0
		var inBatch []*embedSeq
		for _, s := range live {
			if used == budget {
				break
			}
			toks := job.inputs[s.idx]
			n := min(len(toks)-s.done, budget-used)
			seq := int32(len(b.Tables))
			b.Tables = append(b.Tables, s.kv.Table())
			for p := s.done; p < s.done+n; p++ {
				b.Tokens, b.Pos, b.Seq = append(b.Tokens, toks[p]), append(b.Pos, int32(p)), append(b.Seq, seq)
			}
			used += n
			s.step = n
			inBatch = append(inBatch, s)
		}
		vs, err := pooler.Pool(ctx, &b, how)
		if err != nil {
			return nil, err
		}
		kept := live[:0]
		for i, s := range inBatch {
			v, n := vs[i*E:(i+1)*E], s.step
			total := len(job.inputs[s.idx])
			acc := out[s.idx]
			if acc == nil {
				acc = make([]float32, E)
				out[s.idx] = acc
			}
			switch how {
			case model.PoolMean: // a weighted share of the mean
				w := float32(n) / float32(total)
				for j := range acc {
					acc[j] += v[j] * w
				}
			case model.PoolCLS:
				if s.done == 0 {
					copy(acc, v)
				}
			case model.PoolLast, model.PoolRank:
				if s.done+n == total {
					copy(acc, v)
				}
			}
			s.done += n
		}
		for _, s := range live {
			if s.done == len(job.inputs[s.idx]) {
				e.cache.Free(&s.kv)
				continue
			}
			kept = append(kept, s)
		}
		clear(live[len(kept):])
		live = kept
	}
	return out, nil
}
