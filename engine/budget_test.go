package engine

import (
	"errors"
	"testing"
)

func TestBudget(t *testing.T) {
	tests := []struct {
		name                         string
		policy                       MaxTokensPolicy
		ctxLen, promptLen, maxTokens int
		want                         int
		wantParam                    string // "": no error
	}{
		{"no limit takes the room", MaxTokensClamp, 100, 30, 0, 70, ""},
		{"a limit that fits", MaxTokensClamp, 100, 30, 70, 70, ""},
		{"a limit that fits under error", MaxTokensError, 100, 30, 12, 12, ""},
		{"clamp: an agent's 32000 in a small context", MaxTokensClamp, 40960, 12700, 32000, 28260, ""},
		{"zero value clamps", "", 100, 30, 71, 70, ""},
		{"error: one token over", MaxTokensError, 100, 30, 71, 0, "max_tokens"},
		{"clamp: the prompt alone fills the context", MaxTokensClamp, 100, 100, 5, 0, "messages"},
		{"error: the prompt alone is over", MaxTokensError, 100, 120, 0, 0, "messages"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.policy.Budget(tc.ctxLen, tc.promptLen, tc.maxTokens, "messages")
			if tc.wantParam == "" {
				if err != nil || got != tc.want {
					t.Fatalf("Budget = %d, %v; want %d", got, err, tc.want)
				}
				return
			}
			var re *RequestError
			if !errors.As(err, &re) || re.Code != CodeContextLengthExceeded || re.Param != tc.wantParam {
				t.Fatalf("Budget = %d, %v; want context_length_exceeded naming %s", got, err, tc.wantParam)
			}
		})
	}
}

func TestParseMaxTokensPolicy(t *testing.T) {
	tests := []struct {
		in      string
		want    MaxTokensPolicy
		wantErr bool
	}{
		{"", MaxTokensClamp, false},
		{"clamp", MaxTokensClamp, false},
		{"error", MaxTokensError, false},
		{"Clamp", "", true},
		{"truncate", "", true},
	}
	for _, tc := range tests {
		got, err := ParseMaxTokensPolicy(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseMaxTokensPolicy(%q) = %q, %v; want %q (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
