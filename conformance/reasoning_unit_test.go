package conformance

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestChoiceTexts(t *testing.T) {
	t.Parallel()
	tr := &Transcript{Chunks: chunks(
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":1,"delta":{"reasoning_content":"hm"}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"so","content":null}}]}`,
		`{"choices":[{"index":1,"delta":{"reasoning_content":"!","content":"yes"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"no"}}]}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`)}
	got, err := tr.ChoiceTexts(2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []ChoiceText{{Content: "no", Reasoning: "so"}, {Content: "yes", Reasoning: "hm!"}}; got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v, want %+v", got, want)
	}
	resp, err := ResponseChoiceTexts([]byte(`{"choices":[{"index":0,"message":{"content":"a","reasoning_content":"r"}},{"index":1,"text":"t"}]}`), 2)
	if err != nil || resp[0] != (ChoiceText{Content: "a", Reasoning: "r"}) || resp[1] != (ChoiceText{Content: "t"}) {
		t.Errorf("response texts %+v, %v", resp, err)
	}
	if _, err := tr.ChoiceTexts(1); err == nil {
		t.Error("a choice index beyond n was accepted")
	}
}

func TestProbeReasoning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		usage string
		want  bool
	}{
		{`{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"completion_tokens_details":{"reasoning_tokens":0}}`, true},
		{`{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}`, false},
		{`{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"completion_tokens_details":{"reasoning_tokens":null}}`, false},
	} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"choices":[],"usage":` + tc.usage + `}`))
		}))
		ok, why := ProbeReasoning(t.Context(), NewTarget(ts.URL, "m", ""), "m")
		ts.Close()
		if ok != tc.want || (!ok && !strings.Contains(why, EnvReasoningModel)) {
			t.Errorf("usage %s: reasons %v (%s), want %v", tc.usage, ok, why, tc.want)
		}
	}
}
