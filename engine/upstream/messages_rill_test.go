package upstream_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"rill/engine/upstream"
	"rill/service"
)

// messagesUsage is the usage a Messages client reads.
type messagesUsage struct {
	Input    int `json:"input_tokens"`
	Creation int `json:"cache_creation_input_tokens"`
	Read     int `json:"cache_read_input_tokens"`
	Output   int `json:"output_tokens"`
}

func (u messagesUsage) prompt() int { return u.Input + u.Creation + u.Read }

// streamedMessage reads a Messages stream's text, its message_start usage
// and its final usage (message_delta's, which carries every count).
func streamedMessage(t *testing.T, a answer) (text string, start, final messagesUsage) {
	t.Helper()
	for _, data := range a.events {
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage messagesUsage `json:"usage"`
			} `json:"message"`
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
			Usage *messagesUsage `json:"usage"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatalf("bad event %s: %v", data, err)
		}
		switch ev.Type {
		case "message_start":
			start = ev.Message.Usage
		case "content_block_delta":
			text += ev.Delta.Text
		case "message_delta":
			final = *ev.Usage
		case "error":
			t.Fatalf("error event %s", data)
		}
	}
	return text, start, final
}

// TestMessagesBehindRill: a Messages request to a rill in front of another
// rill (kind rill) goes to the upstream's /v1/messages, and the client
// gets the upstream's counts, split as rule 13 splits them: a cold prompt
// reads and writes its whole blocks, the same prompt again reads them all
// and writes none, streamed (from message_start on) or not. A forced tool
// and disabled thinking go there too; a chat request stays chat.
func TestMessagesBehindRill(t *testing.T) {
	t.Parallel()
	rec := &pathRecorder{h: service.New(service.Options{Engine: nativeEngine(t, "tiny"), Logger: discard}), paths: map[string]int{}}
	u, _ := serve(t, rec)
	url := front(t, newUpstream(t, "tiny", upstream.Rill, u))

	body := `{"model":"tiny","max_tokens":6,"ignore_eos":true,"temperature":0,"system":"You are terse.",` +
		`"messages":[{"role":"user","content":"Tell me about the river and the mill by the bridge."}]}`
	var usages []messagesUsage
	var texts []string
	for i := range 2 {
		a := post(t, url, "/v1/messages", body)
		if a.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
		var m struct {
			ID         string `json:"id"`
			StopReason string `json:"stop_reason"`
			Content    []struct {
				Text string `json:"text"`
			} `json:"content"`
			Usage messagesUsage `json:"usage"`
		}
		if err := json.Unmarshal(a.body, &m); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(m.ID, "msg_") || m.StopReason != "max_tokens" || len(m.Content) != 1 {
			t.Fatalf("request %d: %s", i, a.body)
		}
		texts = append(texts, m.Content[0].Text)
		usages = append(usages, m.Usage)
	}
	cold, warm := usages[0], usages[1]
	blocks := (cold.prompt() - 1) / 16 * 16
	if cold.prompt() < 17 || cold.Output != 6 || cold.Read+cold.Creation != blocks {
		t.Errorf("cold usage %+v: want the %d tokens of whole blocks read or written", cold, blocks)
	}
	if warm.prompt() != cold.prompt() || warm.Read != blocks || warm.Creation != 0 || warm.Output != 6 {
		t.Errorf("warm usage %+v (cold %+v): want all %d read, none written", warm, cold, blocks)
	}
	if texts[0] != texts[1] || texts[0] == "" {
		t.Errorf("greedy texts differ: %q %q", texts[0], texts[1])
	}

	s := post(t, url, "/v1/messages", strings.Replace(body, `{`, `{"stream":true,`, 1))
	if s.status != http.StatusOK {
		t.Fatalf("stream: %d %s", s.status, s.body)
	}
	text, start, final := streamedMessage(t, s)
	if text != texts[0] || final != warm {
		t.Errorf("streamed %q with usage %+v, want %q and %+v", text, final, texts[0], warm)
	}
	if start.Input != final.Input || start.Read != final.Read || start.Creation != final.Creation {
		t.Errorf("message_start's input counts %+v are not the message's %+v", start, final)
	}
	if n := rec.count("/v1/messages"); n != 3 || rec.count("/v1/chat/completions") != 0 {
		t.Errorf("upstream paths %v, want 3 POST /v1/messages", rec.paths)
	}

	// A forced tool, one call at most, thinking off: all carried.
	const tool = `{"model":"tiny","max_tokens":300,"temperature":0,"thinking":{"type":"disabled"},` +
		`"messages":[{"role":"user","content":"Weather in Oslo?"}],` +
		`"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string","maxLength":10}},"required":["city"],"additionalProperties":false}}],` +
		`"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true}}`
	a := post(t, url, "/v1/messages", tool)
	if a.status != http.StatusOK {
		t.Fatalf("tool: %d %s", a.status, a.body)
	}
	var m struct {
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type  string         `json:"type"`
			Name  string         `json:"name"`
			Input map[string]any `json:"input"`
		} `json:"content"`
	}
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatal(err)
	}
	if m.StopReason != "tool_use" || len(m.Content) != 1 || m.Content[0].Type != "tool_use" || m.Content[0].Name != "get_weather" || m.Content[0].Input["city"] == nil {
		t.Errorf("tool answer %s", a.body)
	}
	if n := rec.count("/v1/messages"); n != 4 {
		t.Errorf("upstream paths %v: the forced tool went elsewhere", rec.paths)
	}

	// A chat request is chat upstream.
	if got := post(t, url, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`); got.status != http.StatusOK {
		t.Fatalf("chat: %d %s", got.status, got.body)
	}
	if rec.count("/v1/chat/completions") != 1 || rec.count("/v1/messages") != 4 {
		t.Errorf("upstream paths %v", rec.paths)
	}
}
