package service

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"rill/engine"
)

// sliceStream hands out prepared events with no delay: an engine double at
// infinite speed, so that the benchmarks measure the service alone.
type sliceStream struct {
	events []engine.Event
	i      int
}

func (s *sliceStream) TryRecv() (engine.Event, bool, error) {
	if s.i == len(s.events) {
		return engine.Event{}, false, io.EOF
	}
	s.i++
	return s.events[s.i-1], true, nil
}

func (s *sliceStream) Ready() <-chan struct{} { return readyNow }

// discardWriter is a ResponseWriter that flushes and forgets.
type discardWriter struct {
	h http.Header
	n int64
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

const benchTokens = 1024

func benchEvents() []engine.Event {
	words := []string{" once", " upon", " a", " time", ",", " there", " was", " a", " little", " \"girl\""}
	evs := make([]engine.Event, 0, benchTokens+1)
	for i := range benchTokens {
		evs = append(evs, engine.Event{Text: words[i%len(words)]})
	}
	cached := 12.0
	return append(evs, engine.Event{Final: true, FinishReason: engine.FinishLength,
		Stats: &engine.Stats{PromptTokens: 20, CompletionTokens: benchTokens, CachedTokens: &cached}})
}

// BenchmarkStreamPerToken measures the service's cost per streamed token:
// chunk building, SSE framing and flushing, metrics (time to first token,
// inter-token latency) and usage assembly, with the engine emitting
// instantly into a discarding writer. "direct" drives the chunk stream
// alone; "http" goes through ServeHTTP (routing, validation, logging),
// amortised over the tokens of one request.
func BenchmarkStreamPerToken(b *testing.B) {
	events := benchEvents()
	met := newMetrics(&fakeEngine{models: testModels})
	for _, k := range []kind{kindChat, kindCompletion} {
		name := map[kind]string{kindChat: "chat", kindCompletion: "completions"}[k]
		b.Run("direct/"+name, func(b *testing.B) {
			b.ReportAllocs()
			w := &discardWriter{h: http.Header{}}
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				g := &generation{
					job: &job{kind: k, model: "tiny", stream: true, includeUsage: true, n: 1},
					id:  "chatcmpl-bench", created: 1,
					streams: []engine.Stream{&sliceStream{events: events}},
					cancel:  cancel,
					obs:     met.begin("tiny", 1, time.Now()),
				}
				sw := newSSEWriter(w)
				if err := sw.start(); err != nil {
					b.Fatal(err)
				}
				if _, err := g.streamTo(ctx, sw, -1); err != nil {
					b.Fatal(err)
				}
			}
			reportPerToken(b)
		})
	}
	b.Run("http/chat", func(b *testing.B) {
		b.ReportAllocs()
		fake := &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
			return &sliceStream{events: events}, nil
		}}
		s := New(Options{Engine: fake, Logger: slog.New(slog.DiscardHandler)})
		const body = `{"model":"tiny","messages":[{"role":"user","content":"Once upon a time"}],"stream":true,"stream_options":{"include_usage":true}}`
		w := &discardWriter{h: http.Header{}}
		for b.Loop() {
			clear(w.h)
			r, _ := http.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
			s.ServeHTTP(w, r)
		}
		reportPerToken(b)
	})
}

// BenchmarkStreamLoopback streams over a real loopback connection, client
// included, with and without the per-write deadline of WriteIdleTimeout
// (one SetWriteDeadline per event), to show what the deadline costs, and
// as a resumable stream (stream_options.resumable: the event log, its
// batches to the memory store, and the follower between engine and
// socket).
func BenchmarkStreamLoopback(b *testing.B) {
	events := benchEvents()
	const plain = `{"model":"tiny","messages":[{"role":"user","content":"Once upon a time"}],"stream":true}`
	const resumable = `{"model":"tiny","messages":[{"role":"user","content":"Once upon a time"}],"stream":true,"stream_options":{"resumable":true}}`
	for _, tt := range []struct {
		name      string
		writeIdle time.Duration
		body      string
	}{{"write-deadline=on", 0, plain}, {"write-deadline=off", -1, plain}, {"resumable", 0, resumable}} {
		body := tt.body
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			fake := &fakeEngine{models: testModels, respond: func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
				return &sliceStream{events: events}, nil
			}}
			ts := newTestServer(b, fake, Options{WriteIdleTimeout: tt.writeIdle, PingInterval: -1})
			client := ts.Client()
			for b.Loop() {
				resp, err := client.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
			reportPerToken(b)
		})
	}
}

func reportPerToken(b *testing.B) {
	b.Helper()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchTokens, "ns/token")
	// allocs/op is reported by ReportAllocs; per token it is that / benchTokens.
}

// The encoding/json shapes of a chat content chunk, for comparison only.
type jsonDelta struct {
	Content string `json:"content"`
}

type jsonChoice struct {
	Index        int       `json:"index"`
	Delta        jsonDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type jsonChunk struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []jsonChoice `json:"choices"`
	Usage   *Usage       `json:"usage"`
}

// BenchmarkChunkEncode compares the append encoder with encoding/json on a
// chat content chunk, the object written once per token.
func BenchmarkChunkEncode(b *testing.B) {
	g := &generation{job: &job{kind: kindChat, model: "tiny", stream: true, includeUsage: true, n: 1},
		id: "chatcmpl-0123456789abcdef", created: 1796030631}
	ev := engine.Event{Text: " little \"girl\""}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		w := &countWriter{}
		c := newChunker(g, w)
		for b.Loop() {
			if err := c.event(0, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		chunk := jsonChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
			Choices: []jsonChoice{{}}}
		var n int
		for b.Loop() {
			chunk.Choices[0] = jsonChoice{Index: 0, Delta: jsonDelta{Content: ev.Text}}
			data, err := json.Marshal(&chunk)
			if err != nil {
				b.Fatal(err)
			}
			n += len(data)
		}
		_ = n
	})
}

// countWriter is a chunkWriter that only counts.
type countWriter struct{ n int }

func (c *countWriter) chunk(data []byte) error { c.n += len(data); return nil }
func (c *countWriter) ping() error             { return nil }
func (c *countWriter) fail(*apiError) error    { return nil }
func (c *countWriter) done() error             { return nil }

// TestChunkEncodersAgree: the encoding/json shape the benchmark compares
// against decodes to the same chunk as the append encoder's output.
func TestChunkEncodersAgree(t *testing.T) {
	t.Parallel()
	g := &generation{job: &job{kind: kindChat, model: "tiny", stream: true, includeUsage: true, n: 1},
		id: "chatcmpl-x", created: 7}
	w := &recordingWriter{}
	c := newChunker(g, w)
	ev := engine.Event{Text: "a \"b\"\n"}
	if err := c.event(0, &ev); err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(&jsonChunk{ID: g.id, Object: "chat.completion.chunk", Created: 7, Model: "tiny",
		Choices: []jsonChoice{{Delta: jsonDelta{Content: ev.Text}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.chunks) != 1 || string(w.chunks[0]) != string(want) {
		t.Errorf("append encoder\n%s\nencoding/json\n%s", w.chunks, want)
	}
}

// recordingWriter keeps copies of the chunks it is given.
type recordingWriter struct {
	chunks [][]byte
	pings  int
	err    *apiError
	ended  bool
}

func (r *recordingWriter) chunk(data []byte) error {
	r.chunks = append(r.chunks, append([]byte(nil), data...))
	return nil
}
func (r *recordingWriter) ping() error            { r.pings++; return nil }
func (r *recordingWriter) fail(e *apiError) error { r.err = e; return nil }
func (r *recordingWriter) done() error            { r.ended = true; return nil }

// BenchmarkMetricsPerToken measures the metrics' share of a streamed token:
// what requestMetrics.event does for a piece of text (a clock read and an
// inter-token latency observation).
func BenchmarkMetricsPerToken(b *testing.B) {
	m := newMetrics(&fakeEngine{models: testModels})
	o := m.begin("tiny", 1, time.Now())
	ev := engine.Event{Text: " little"}
	b.ReportAllocs()
	for b.Loop() {
		o.event(0, &ev)
	}
}
