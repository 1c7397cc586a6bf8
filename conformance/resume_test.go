package conformance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"rill/conformance"
)

// Streams that outlive their connection (label resume): OpenAI's background
// responses (poll, stream from starting_after, cancel, input_items), and
// rill's resumable chat and completions streams (stream_options.resumable,
// resumed with Last-Event-ID). A target that refuses the feature (a 4xx
// that names it, or a stream without event ids) skips these specs with its
// answer; the in-process rill must have them.

// resumeOut is the output cap of these specs: long enough that a drop
// after a few events leaves most of the text to resume.
const resumeOut = 24

// needFeature skips (against another server) or fails (in-process) a spec
// whose feature the target does not have, saying why.
func needFeature(ok bool, why string) {
	GinkgoHelper()
	switch {
	case ok:
	case env.inProcess:
		Fail("rill has this feature, but " + why)
	default:
		Skip(why)
	}
}

// sseEvent is one event of a stream with its id line.
type sseEvent struct {
	id    string // "" when the event has none
	event string
	data  string
}

// readEvents reads SSE events from r until it ends, or max events (max <=
// 0: no limit).
func readEvents(r io.Reader, max int) ([]sseEvent, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var out []sseEvent
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" {
				out = append(out, cur)
				if max > 0 && len(out) == max {
					return out, nil
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id:"):
			cur.id = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "event:"):
			cur.event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			cur.data = strings.TrimSpace(line[5:])
		}
	}
	return out, sc.Err()
}

// chunkText sums a chat or completions stream: its text, its usage (the
// chunk that carries one), its id, and whether it ended with [DONE].
func chunkText(evs []sseEvent) (text, usage, id string, done bool) {
	for _, ev := range evs {
		if ev.data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal([]byte(ev.data), &c) != nil {
			continue
		}
		id = c.ID
		for _, ch := range c.Choices {
			text += ch.Text + ch.Delta.Content
		}
		if len(c.Usage) > 0 && string(c.Usage) != "null" {
			usage = string(c.Usage)
		}
	}
	return text, usage, id, done
}

// openStream POSTs body to path and returns the open stream; a status
// other than 200 comes back with its body, the stream closed.
func openStream(ctx context.Context, path string, body map[string]any) (*http.Response, string) {
	GinkgoHelper()
	data, err := json.Marshal(body)
	Expect(err).NotTo(HaveOccurred())
	resp, err := env.main.Do(ctx, http.MethodPost, path, data, "application/json")
	Expect(err).NotTo(HaveOccurred())
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Sprintf("POST %s answered %d: %s", path, resp.StatusCode, b)
	}
	return resp, ""
}

var _ = Describe("POST /v1/chat/completions and /v1/completions with stream_options.resumable", Label("resume", "sse"), func() {
	for _, api := range []struct {
		name, path string
		body       func() map[string]any
	}{
		{"chat", conformance.Chat.Path, func() map[string]any {
			return map[string]any{"model": env.main.Model, "messages": []map[string]any{{"role": "user", "content": shortPrompt()}}}
		}},
		{"completions", conformance.Completions.Path, func() map[string]any {
			return map[string]any{"model": env.main.Model, "prompt": shortPrompt()}
		}},
	} {
		Context(api.name+": a client that drops after a few events", func() {
			It("resumes with Last-Event-ID exactly after them: the text and usage of an uninterrupted run", func(sctx SpecContext) {
				ctx, cancel := context.WithTimeout(sctx, conformance.RequestTimeout)
				defer cancel()
				body := api.body()
				body["stream"], body["temperature"], body["max_tokens"] = true, 0, resumeOut
				body["stream_options"] = map[string]any{"include_usage": true}

				plain, why := openStream(ctx, api.path, body)
				Expect(why).To(BeEmpty())
				whole, err := readEvents(plain.Body, 0)
				plain.Body.Close()
				Expect(err).NotTo(HaveOccurred())
				wantText, wantUsage, _, _ := chunkText(whole)

				body["stream_options"] = map[string]any{"include_usage": true, "resumable": true}
				dctx, drop := context.WithCancel(ctx)
				defer drop()
				first, why := openStream(dctx, api.path, body)
				needFeature(first != nil, why)
				const k = 3
				head, err := readEvents(first.Body, k)
				drop()
				first.Body.Close()
				Expect(err).NotTo(HaveOccurred())
				Expect(head).To(HaveLen(k), "events before the drop")
				needFeature(head[0].id != "", "the target's resumable stream has no event ids")
				_, _, id, _ := chunkText(head)
				Expect(id).NotTo(BeEmpty(), "the chunks' id")

				req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.main.URL(api.path+"/"+id), nil)
				Expect(err).NotTo(HaveOccurred())
				req.Header.Set("Last-Event-ID", head[k-1].id)
				if env.main.APIKey != "" {
					req.Header.Set("Authorization", "Bearer "+env.main.APIKey)
				}
				resp, err := http.DefaultClient.Do(req)
				Expect(err).NotTo(HaveOccurred())
				defer resp.Body.Close()
				Expect(resp.StatusCode).To(Equal(http.StatusOK), "GET %s/%s with Last-Event-ID", api.path, id)
				tail, err := readEvents(resp.Body, 0)
				Expect(err).NotTo(HaveOccurred())
				seen := map[string]bool{}
				for _, ev := range append(head, tail...) {
					if ev.id != "" {
						Expect(seen[ev.id]).To(BeFalse(), "event id %s twice", ev.id)
						seen[ev.id] = true
					}
				}
				text, usage, _, done := chunkText(append(head, tail...))
				Expect(done).To(BeTrue(), "the resumed stream ends with [DONE]")
				Expect(text).To(Equal(wantText), "text of the dropped and resumed stream")
				// The counts, not cached_tokens: the second run of a prompt
				// may find it cached.
				counts := func(u string) [3]int {
					var c struct {
						PromptTokens     int `json:"prompt_tokens"`
						CompletionTokens int `json:"completion_tokens"`
						TotalTokens      int `json:"total_tokens"`
					}
					Expect(json.Unmarshal([]byte(u), &c)).To(Succeed(), "usage %s", u)
					Expect(c.CompletionTokens).To(BeNumerically(">", 0), "usage %s", u)
					return [3]int{c.PromptTokens, c.CompletionTokens, c.TotalTokens}
				}
				Expect(usage).NotTo(BeEmpty(), "the resumed stream's usage chunk")
				Expect(counts(usage)).To(Equal(counts(wantUsage)), "prompt, completion and total tokens of the dropped and resumed stream")
			})
		})
	}
})

// background creates a background response of body, skipping or failing
// when the target refuses background mode.
func background(ctx context.Context, body map[string]any) *conformance.Response {
	GinkgoHelper()
	body["background"] = true
	r, err := env.main.Post(ctx, conformance.ResponsesPath, body)
	Expect(err).NotTo(HaveOccurred())
	needFeature(r.Status == http.StatusOK, fmt.Sprintf("POST %s with background answered %d: %s", conformance.ResponsesPath, r.Status, r.Body))
	// A server that does not know the field may drop it and answer in the
	// foreground (llama.cpp's does): it claims no background mode.
	var obj struct {
		Background *bool  `json:"background"`
		Status     string `json:"status"`
	}
	_ = json.Unmarshal(r.Body, &obj)
	needFeature(obj.Background != nil && *obj.Background || obj.Status == "queued" || obj.Status == "in_progress",
		fmt.Sprintf("POST %s with background answered a %q response without \"background\": true: the target ignores background mode", conformance.ResponsesPath, obj.Status))
	return r
}

var _ = Describe("POST /v1/responses with background", Label("resume", "responses"), func() {
	newBody := func() map[string]any {
		return map[string]any{"model": env.main.Model, "input": shortPrompt(), "max_output_tokens": resumeOut, "temperature": 0}
	}
	Context("a background response", func() {
		It("answers at once, queued or in progress, and polling finds it done with the text of the same request in the foreground", func(sctx SpecContext) {
			needResponses(false)
			ctx, cancel := context.WithTimeout(sctx, conformance.RequestTimeout)
			defer cancel()
			body := newBody()
			fg, _, _ := postResponse(ctx, body)
			created := background(ctx, body)
			var obj struct {
				ID         string `json:"id"`
				Status     string `json:"status"`
				Background bool   `json:"background"`
			}
			Expect(json.Unmarshal(created.Body, &obj)).To(Succeed())
			Expect(obj.Status).To(BeElementOf("queued", "in_progress"), "status of the created response")
			Expect(obj.Background).To(BeTrue())
			client := newClient(env.main, &capture{})
			var done *responses.Response
			Eventually(func() string {
				r, err := client.Responses.Get(ctx, obj.ID, responses.ResponseGetParams{})
				Expect(err).NotTo(HaveOccurred())
				done = r
				return string(r.Status)
			}).WithContext(ctx).WithPolling(20 * time.Millisecond).Should(BeElementOf("completed", "incomplete"))
			Expect(done.OutputText()).To(Equal(outputText(fg)), "text of the background response")
			var fgUsage struct {
				OutputTokens int64 `json:"output_tokens"`
			}
			Expect(json.Unmarshal(fg.Usage, &fgUsage)).To(Succeed())
			Expect(done.Usage.OutputTokens).To(Equal(fgUsage.OutputTokens), "output tokens of the background response")

			page, err := client.Responses.InputItems.List(ctx, obj.ID, responses.InputItemListParams{})
			Expect(err).NotTo(HaveOccurred())
			Expect(page.Data).To(HaveLen(1), "input items of a one-message input")
			Expect(page.Data[0].Type).To(Equal("message"))
		})

		It("streams its events after starting_after: the sequence numbers after it, and the tail of the whole text", func(sctx SpecContext) {
			needResponses(false)
			ctx, cancel := context.WithTimeout(sctx, conformance.RequestTimeout)
			defer cancel()
			created := background(ctx, newBody())
			var obj struct {
				ID string `json:"id"`
			}
			Expect(json.Unmarshal(created.Body, &obj)).To(Succeed())
			client := newClient(env.main, &capture{})
			follow := func(after int64) (seqs []int64, text, last string) {
				p := responses.ResponseGetParams{}
				if after >= 0 {
					p.StartingAfter = openai.Int(after)
				}
				s := client.Responses.GetStreaming(ctx, obj.ID, p)
				for s.Next() {
					ev := s.Current()
					seqs = append(seqs, ev.SequenceNumber)
					if ev.Type == "response.output_text.delta" {
						text += ev.Delta
					}
					last = ev.Type
				}
				Expect(s.Err()).NotTo(HaveOccurred())
				return seqs, text, last
			}
			const after = 4
			seqs, tail, last := follow(after)
			_, whole, wholeLast := follow(-1)
			Expect(wholeLast).To(BeElementOf("response.completed", "response.incomplete"))
			Expect(last).To(Equal(wholeLast))
			Expect(seqs).NotTo(BeEmpty())
			for i, s := range seqs {
				Expect(s).To(BeEquivalentTo(after+1+i), "sequence_number of event %d after %d", i, after)
			}
			Expect(whole).To(HaveSuffix(tail), "the text after event %d", after)
		})

		It("is stopped by POST /v1/responses/{id}/cancel, which answers it cancelled (or as it ended), the same twice", func(sctx SpecContext) {
			needResponses(false)
			ctx, cancel := context.WithTimeout(sctx, conformance.RequestTimeout)
			defer cancel()
			body := newBody()
			body["max_output_tokens"] = 256
			created := background(ctx, body)
			var obj struct {
				ID string `json:"id"`
			}
			Expect(json.Unmarshal(created.Body, &obj)).To(Succeed())
			client := newClient(env.main, &capture{})
			first, err := client.Responses.Cancel(ctx, obj.ID)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(first.Status)).To(BeElementOf("cancelled", "completed", "incomplete"))
			second, err := client.Responses.Cancel(ctx, obj.ID)
			Expect(err).NotTo(HaveOccurred())
			Expect(second.Status).To(Equal(first.Status), "a second cancel")
			got, err := client.Responses.Get(ctx, obj.ID, responses.ResponseGetParams{})
			Expect(err).NotTo(HaveOccurred())
			Expect(got.Status).To(Equal(first.Status), "GET after cancel")
		})
	})

	Context("a response that was not created with background", func() {
		It("cannot be cancelled: a 400", func(sctx SpecContext) {
			needResponses(false)
			ctx, cancel := context.WithTimeout(sctx, conformance.RequestTimeout)
			defer cancel()
			background(ctx, newBody()) // the feature is there
			fg, _, _ := postResponse(ctx, newBody())
			r, err := env.main.Send(ctx, http.MethodPost, conformance.ResponsesPath+"/"+fg.ID+"/cancel", nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Status).To(Equal(http.StatusBadRequest), "cancel of a foreground response: %s", r.Body)
			expectNone(conformance.CheckError(r.Status, r.Body), "the error's shape")
		})
	})
})

// outputText is the text of a response object's output messages.
func outputText(r *conformance.ResponseObject) string {
	var b strings.Builder
	for _, it := range r.Output {
		for _, c := range it.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

var _ = Describe("WebSocket /v1/chat/completions with a resumable create", Label("resume", "websocket"), func() {
	Context("a connection that drops after a few chunks", func() {
		It("resumes on a new connection with a resume message after the last seq: the text of an uninterrupted run", func(sctx SpecContext) {
			if !env.main.caps.WebSocket {
				Skip(env.main.caps.WebSocketReason)
			}
			ctx, cancel := context.WithTimeout(sctx, conformance.RequestTimeout)
			defer cancel()
			body := map[string]any{"model": env.main.Model, "messages": []map[string]any{{"role": "user", "content": shortPrompt()}},
				"temperature": 0, "max_tokens": resumeOut}

			body["stream"] = true // for the uninterrupted run over SSE; implied on WebSocket
			plain, why := openStream(ctx, conformance.Chat.Path, body)
			Expect(why).To(BeEmpty())
			whole, err := readEvents(plain.Body, 0)
			plain.Body.Close()
			Expect(err).NotTo(HaveOccurred())
			want, _, _, _ := chunkText(whole)

			body["stream_options"] = map[string]any{"resumable": true}
			type seqChunk struct {
				Seq   *int64 `json:"seq"`
				Chunk struct {
					ID      string `json:"id"`
					Choices []struct {
						Delta struct {
							Content string `json:"content"`
						} `json:"delta"`
					} `json:"choices"`
				} `json:"chunk"`
			}
			var text strings.Builder
			var id string
			last := int64(-1)
			take := func(m *conformance.ServerMessage) {
				GinkgoHelper()
				var c seqChunk
				Expect(json.Unmarshal(m.Raw, &c)).To(Succeed())
				needFeature(c.Seq != nil, "the target's resumable chunks carry no seq")
				Expect(*c.Seq).To(BeNumerically(">", last), "seq after %d", last)
				last, id = *c.Seq, c.Chunk.ID
				for _, ch := range c.Chunk.Choices {
					text.WriteString(ch.Delta.Content)
				}
			}
			first, err := conformance.DialWebSocket(ctx, env.main.Target, conformance.Chat.Path)
			Expect(err).NotTo(HaveOccurred())
			Expect(first.Create(ctx, "r1", body)).To(Succeed())
			for range 3 {
				m, err := first.Next(ctx)
				Expect(err).NotTo(HaveOccurred())
				needFeature(m.Type == "chunk", fmt.Sprintf("a resumable create was answered %s", m.Raw))
				take(m)
			}
			first.Close()

			second, err := conformance.DialWebSocket(ctx, env.main.Target, conformance.Chat.Path)
			Expect(err).NotTo(HaveOccurred())
			defer second.Close()
			resume, _ := json.Marshal(map[string]any{"type": "resume", "request_id": "r2", "stream_id": id, "last_seq": last})
			Expect(second.SendRaw(ctx, resume)).To(Succeed())
			for {
				m, err := second.Next(ctx)
				Expect(err).NotTo(HaveOccurred())
				Expect(m.RequestID).NotTo(BeNil(), "message %s", m.Raw)
				Expect(*m.RequestID).To(Equal("r2"))
				if m.Type != "chunk" {
					Expect(m.Type).To(Equal("done"), "the resumed request ends with %s", m.Raw)
					break
				}
				take(m)
			}
			Expect(text.String()).To(Equal(want), "text of the dropped and resumed stream")
		})
	})
})
