package engine

import "fmt"

// MaxTokensPolicy says what an engine does with a request whose MaxTokens
// is more than the context leaves after its prompt. Agents send budgets
// sized for the largest models (Qwen Code sends max_tokens 32000 whatever
// the model), so the default follows llama.cpp's server and Ollama rather
// than vLLM.
type MaxTokensPolicy string

const (
	// MaxTokensClamp generates until the context is full and finishes
	// with FinishLength; the zero value means it.
	MaxTokensClamp MaxTokensPolicy = "clamp"
	// MaxTokensError refuses the request with context_length_exceeded
	// (vLLM's and OpenAI's behaviour).
	MaxTokensError MaxTokensPolicy = "error"
)

// ParseMaxTokensPolicy reads a policy by name; "" is the default, clamp.
func ParseMaxTokensPolicy(name string) (MaxTokensPolicy, error) {
	switch p := MaxTokensPolicy(name); p {
	case "", MaxTokensClamp:
		return MaxTokensClamp, nil
	case MaxTokensError:
		return p, nil
	}
	return "", fmt.Errorf("unknown max tokens policy %q: want %s or %s", name, MaxTokensClamp, MaxTokensError)
}

// Budget returns how many tokens a choice may generate in a context of
// ctxLen tokens after a prompt of promptLen, when the request asked for
// maxTokens (0: no limit of its own). A prompt that leaves no room is
// refused whatever the policy, with context_length_exceeded naming
// promptParam; a maxTokens beyond the room is the room under
// MaxTokensClamp and refused (naming max_tokens) under MaxTokensError.
func (p MaxTokensPolicy) Budget(ctxLen, promptLen, maxTokens int, promptParam string) (int, error) {
	room := ctxLen - promptLen
	switch {
	case room <= 0:
		return 0, Errorf(CodeContextLengthExceeded, promptParam,
			"This model's maximum context length is %d tokens. However, your prompt is %d tokens.", ctxLen, promptLen)
	case maxTokens == 0:
		return room, nil
	case maxTokens <= room:
		return maxTokens, nil
	case p == MaxTokensError:
		return 0, Errorf(CodeContextLengthExceeded, "max_tokens",
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the prompt or the completion length.",
			ctxLen, promptLen+maxTokens, promptLen, maxTokens)
	}
	return room, nil
}
