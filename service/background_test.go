package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"rill/engine"
	"rill/store"
)

// slowPieces answers every request with n pieces "w0 ", "w1 ", ..., one
// per delay; cancelled, if set, is closed when a stream is cancelled.
func slowPieces(n int, delay time.Duration, cancelled chan struct{}) func(context.Context, *engine.Request) (engine.Stream, error) {
	pieces := make([]string, n)
	for i := range pieces {
		pieces[i] = fmt.Sprintf("w%d ", i)
	}
	return func(ctx context.Context, req *engine.Request) (engine.Stream, error) {
		return &fakeStream{ctx: ctx, delay: delay, cancelled: cancelled,
			events: script(1, pieces, engine.FinishStop, plainStats(3, n))}, nil
	}
}

func piecesText(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "w%d ", i)
	}
	return b.String()
}

func backgroundClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
}

// pollDone polls response id until it is no longer queued or in progress.
func pollDone(ctx context.Context, t *testing.T, client openai.Client, id string) *responses.Response {
	t.Helper()
	for {
		r, err := client.Responses.Get(ctx, id, responses.ResponseGetParams{})
		if err != nil {
			t.Fatalf("poll %s: %v", id, err)
		}
		if r.Status != responses.ResponseStatusQueued && r.Status != responses.ResponseStatusInProgress {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("poll %s: %v, still %s", id, ctx.Err(), r.Status)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestBackgroundResponse: through openai-go, a background response answers
// at once, queued; polling finds it completed with the whole text; its
// events stream from the start and from the middle (starting_after) with
// the sequence numbers after it and the same text; its input items list.
func TestBackgroundResponse(t *testing.T) {
	t.Parallel()
	const n = 12
	fake := &fakeEngine{respond: slowPieces(n, 15*time.Millisecond, nil)}
	ts := newTestServer(t, fake, Options{})
	client := backgroundClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	created, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("count")}})
	if err != nil {
		t.Fatal(err)
	}
	mustValidate(t, "Response", []byte(created.RawJSON()))
	if created.Status != responses.ResponseStatusQueued || !created.Background {
		t.Errorf("created: status %s, background %v", created.Status, created.Background)
	}

	// Stream it live from its middle while it runs, and from its start.
	type result struct {
		seqs []int64
		text string
		last string
	}
	follow := func(after *int64) result {
		p := responses.ResponseGetParams{}
		if after != nil {
			p.StartingAfter = openai.Int(*after)
		}
		s := client.Responses.GetStreaming(ctx, created.ID, p)
		var r result
		for s.Next() {
			ev := s.Current()
			r.seqs = append(r.seqs, ev.SequenceNumber)
			if ev.Type == "response.output_text.delta" {
				r.text += ev.Delta
			}
			r.last = ev.Type
		}
		if err := s.Err(); err != nil {
			t.Errorf("stream after %v: %v", after, err)
		}
		return r
	}
	const middle = 6
	mid := follow(ptr(int64(middle)))
	whole := follow(nil)
	for name, r := range map[string]result{"from the start": whole, "from the middle": mid} {
		if r.last != "response.completed" {
			t.Errorf("%s: last event %s", name, r.last)
		}
		for i, seq := range r.seqs {
			first := int64(0)
			if name == "from the middle" {
				first = middle + 1
			}
			if seq != first+int64(i) {
				t.Fatalf("%s: event %d has sequence_number %d", name, i, seq)
			}
		}
	}
	if whole.text != piecesText(n) {
		t.Errorf("whole stream text %q", whole.text)
	}
	if !strings.HasSuffix(whole.text, mid.text) || mid.text == "" || mid.text == whole.text {
		t.Errorf("middle text %q is not the tail of %q", mid.text, whole.text)
	}

	done := pollDone(ctx, t, client, created.ID)
	if done.Status != responses.ResponseStatusCompleted || done.OutputText() != piecesText(n) || done.Usage.OutputTokens != n {
		t.Errorf("polled: %s %q usage %+v", done.Status, done.OutputText(), done.Usage)
	}
	page, err := client.Responses.InputItems.List(ctx, created.ID, responses.InputItemListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].Type != "message" || page.Data[0].AsMessage().Role != "user" ||
		len(page.Data[0].AsMessage().Content) != 1 || page.Data[0].AsMessage().Content[0].Text != "count" || page.HasMore {
		t.Errorf("input items %s", page.RawJSON())
	}
	// A later response continues it, as any stored response.
	next, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", PreviousResponseID: openai.String(created.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("again")}})
	if err != nil {
		t.Fatal(err)
	}
	if msgs := fake.requests()[1].Messages; next.Status != responses.ResponseStatusCompleted || len(msgs) != 3 ||
		msgs[1].Content != piecesText(n) {
		t.Errorf("continued: %s, engine messages %+v", next.Status, msgs)
	}
}

// TestBackgroundCancel: cancel stops a running background response (its
// engine stream is cancelled) and answers it cancelled; a second cancel
// answers the same; GET finds it cancelled; a response that was not a
// background one cannot be cancelled.
func TestBackgroundCancel(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	fake := &fakeEngine{respond: slowPieces(1000, 20*time.Millisecond, cancelled)}
	ts := newTestServer(t, fake, Options{})
	client := backgroundClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	created, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("count")}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // some text first, and the store's copy (flushDelay)
	if r, err := client.Responses.Get(ctx, created.ID, responses.ResponseGetParams{}); err != nil || r.Status != responses.ResponseStatusInProgress {
		t.Errorf("GET while running: %v %v", r, err)
	}
	for i := range 2 {
		r, err := client.Responses.Cancel(ctx, created.ID)
		if err != nil {
			t.Fatalf("cancel %d: %v", i, err)
		}
		mustValidate(t, "Response", []byte(r.RawJSON()))
		if r.Status != responses.ResponseStatusCancelled {
			t.Errorf("cancel %d: status %s", i, r.Status)
		}
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the engine stream was not cancelled")
	}
	if r, err := client.Responses.Get(ctx, created.ID, responses.ResponseGetParams{}); err != nil || r.Status != responses.ResponseStatusCancelled {
		t.Errorf("GET after cancel: %v %v", r, err)
	}

	fake2 := &fakeEngine{respond: slowPieces(2, 0, nil)}
	ts2 := newTestServer(t, fake2, Options{})
	client2 := backgroundClient(ts2.URL)
	fg, err := client2.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client2.Responses.Cancel(ctx, fg.ID)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
		t.Errorf("cancel of a foreground response: %v", err)
	}
}

// TestBackgroundRefused: background needs the store: store false, or a
// server that stores nothing, is a 400 that names background; so is a
// GET stream of a response that was not a background one.
func TestBackgroundRefused(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{respond: slowPieces(2, 0, nil)}
	on := newTestServer(t, fake, Options{})
	off := newTestServer(t, fake, Options{ResponsesStore: -1})
	tests := []struct {
		name, url, body string
	}{
		{"store false", on.URL, `{"model":"tiny","input":"x","background":true,"store":false}`},
		{"no store", off.URL, `{"model":"tiny","input":"x","background":true}`},
	}
	for _, tt := range tests {
		resp, body := post(t, http.DefaultClient, tt.url+"/v1/responses", tt.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"param":"background"`) {
			t.Errorf("%s: %d %s", tt.name, resp.StatusCode, body)
		}
	}
	_, body := post(t, http.DefaultClient, on.URL+"/v1/responses", `{"model":"tiny","input":"x"}`)
	id := strings.Split(strings.SplitN(string(body), `"id":"`, 2)[1], `"`)[0]
	resp, err := http.Get(on.URL + "/v1/responses/" + id + "?stream=true")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET stream of a foreground response: %d", resp.StatusCode)
	}
}

// TestBackgroundStreamSurvivesClient: a background response created with
// stream true streams, and when its client leaves after a few events it
// runs on to completion; a new GET stream resumes after the last event the
// client saw, and the two parts make the whole text.
func TestBackgroundStreamSurvivesClient(t *testing.T) {
	t.Parallel()
	const n = 20
	fake := &fakeEngine{respond: slowPieces(n, 10*time.Millisecond, nil)}
	ts := newTestServer(t, fake, Options{})
	client := backgroundClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sctx, drop := context.WithCancel(ctx)
	s := client.Responses.NewStreaming(sctx, responses.ResponseNewParams{Model: "tiny", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("count")}})
	var id, text string
	last := int64(-1)
	for s.Next() {
		ev := s.Current()
		if ev.Type == "response.created" {
			id = ev.Response.ID
		}
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
		last = ev.SequenceNumber
		if strings.Count(text, " ") == 5 {
			break
		}
	}
	drop()
	s.Close()
	if id == "" || last < 0 {
		t.Fatalf("no events before the drop: %v", s.Err())
	}
	rs := client.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(last)})
	for rs.Next() {
		ev := rs.Current()
		if ev.SequenceNumber != last+1 {
			t.Fatalf("resumed event %d after %d", ev.SequenceNumber, last)
		}
		last = ev.SequenceNumber
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if text != piecesText(n) {
		t.Errorf("text %q", text)
	}
	if r := pollDone(ctx, t, client, id); r.Status != responses.ResponseStatusCompleted {
		t.Errorf("status %s", r.Status)
	}
}

// TestBackgroundShutdown: Drain waits for a background response and gives
// up when its grace runs out; WaitConnections then cuts it, and it ends
// failed with server_shutting_down, its last event in the store; a new
// background response is refused while draining.
func TestBackgroundShutdown(t *testing.T) {
	t.Parallel()
	fake := &fakeEngine{models: testModels, respond: slowPieces(1000, 20*time.Millisecond, nil)}
	api := New(Options{Engine: fake, Logger: slog.New(slog.DiscardHandler)})
	ts := httptest.NewServer(api)
	defer ts.Close()
	client := backgroundClient(ts.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	params := responses.ResponseNewParams{Model: "tiny", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("count")}}
	created, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer gcancel()
	if err := api.Drain(gctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain with a background response running: %v", err)
	}
	_, err = client.Responses.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("background create while draining: %v", err)
	}
	if err := api.WaitConnections(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := client.Responses.Get(ctx, created.ID, responses.ResponseGetParams{})
	if err != nil || r.Status != responses.ResponseStatusFailed || r.Error.Code != "server_shutting_down" {
		t.Fatalf("after shutdown: %v %v", r, err)
	}
	s := client.Responses.GetStreaming(ctx, created.ID, responses.ResponseGetParams{})
	last := ""
	for s.Next() {
		last = s.Current().Type
	}
	if last != "response.failed" {
		t.Errorf("last event %q (%v)", last, s.Err())
	}
}

// TestBackgroundPathsKeepToResponses: the Responses paths do not reach a
// resumable chat stream by its id: no cancel (the stream runs on), no
// stream, no object.
func TestBackgroundPathsKeepToResponses(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	fake := &fakeEngine{respond: slowPieces(50, 10*time.Millisecond, cancelled)}
	ts := newTestServer(t, fake, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := postStream(t, ctx, ts.URL+"/v1/chat/completions",
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"resumable":true}}`)
	defer resp.Body.Close()
	head := readIDEvents(t, resp.Body, 1)
	var c struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal([]byte(head[0].data), &c)
	for _, req := range []struct{ method, path string }{
		{http.MethodPost, "/v1/responses/" + c.ID + "/cancel"},
		{http.MethodGet, "/v1/responses/" + c.ID + "?stream=true"},
		{http.MethodGet, "/v1/responses/" + c.ID},
	} {
		r, _ := http.NewRequestWithContext(ctx, req.method, ts.URL+req.path, nil)
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %d, want 404", req.method, req.path, res.StatusCode)
		}
	}
	text, _, done := streamText(t, append(head, readIDEvents(t, resp.Body, 0)...))
	if !done || text != piecesText(50) {
		t.Errorf("the chat stream after the Responses calls: done %v, text %q", done, text)
	}
}

// TestBackgroundLost: a background response whose process died while it
// ran (its stream in progress, not updated for long, run by nobody here)
// polls as failed, and its stream ends, instead of waiting for ever; a
// fresh one that runs elsewhere still polls in progress.
func TestBackgroundLost(t *testing.T) {
	t.Parallel()
	st := store.NewMemory(store.Retention{})
	ts := newTestServer(t, &fakeEngine{respond: slowPieces(1, 0, nil)}, Options{Store: st})
	ctx := context.Background()
	client := backgroundClient(ts.URL)
	obj := `{"id":"resp_%s","object":"response","created_at":1,"status":"in_progress","background":true,"error":null,"incomplete_details":null,"model":"tiny","output":[]}`
	for _, tt := range []struct {
		id      string
		updated time.Time
		want    responses.ResponseStatus
	}{
		{"lost", time.Now().Add(-2 * staleAfter), responses.ResponseStatusFailed},
		{"alive", time.Now(), responses.ResponseStatusInProgress},
	} {
		data := encodeBackground([]byte(fmt.Sprintf(obj, tt.id)), nil)
		if err := st.PutStream(ctx, store.Stream{ID: "resp_" + tt.id, Status: statusInProgress, Data: data, Updated: tt.updated}); err != nil {
			t.Fatal(err)
		}
		r, err := client.Responses.Get(ctx, "resp_"+tt.id, responses.ResponseGetParams{})
		if err != nil || r.Status != tt.want {
			t.Errorf("%s: %v %v, want %s", tt.id, r, err, tt.want)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s := client.Responses.GetStreaming(sctx, "resp_lost", responses.ResponseGetParams{})
	for s.Next() {
	}
	if sctx.Err() != nil {
		t.Error("the stream of a lost response did not end")
	}
}

// TestBackgroundCancelElsewhere: two servers share a store; a background
// response runs on the first, the second cancels it (through the store)
// and answers it cancelled, and the first's engine stream stops; polls
// and streams on either server find it cancelled.
func TestBackgroundCancelElsewhere(t *testing.T) {
	t.Parallel()
	st := store.NewMemory(store.Retention{})
	cancelled := make(chan struct{})
	a := newTestServer(t, &fakeEngine{respond: slowPieces(1000, 20*time.Millisecond, cancelled)}, Options{Store: st})
	b := newTestServer(t, &fakeEngine{respond: slowPieces(1, 0, nil)}, Options{Store: st})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca, cb := backgroundClient(a.URL), backgroundClient(b.URL)
	created, err := ca.Responses.New(ctx, responses.ResponseNewParams{Model: "tiny", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("count")}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	r, err := cb.Responses.Cancel(ctx, created.ID)
	if err != nil || r.Status != responses.ResponseStatusCancelled {
		t.Fatalf("cancel on the other server: %v %v", r, err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the engine stream on the first server was not cancelled")
	}
	for _, client := range []openai.Client{ca, cb} {
		if r, err := client.Responses.Get(ctx, created.ID, responses.ResponseGetParams{}); err != nil || r.Status != responses.ResponseStatusCancelled {
			t.Errorf("GET: %v %v", r, err)
		}
	}
}

// TestInputItems: GET /v1/responses/{id}/input_items lists a stored
// response's input items (messages, calls and their outputs), newest first
// by default, in pages of limit after an item id, as openai-go's auto
// pager reads them; bad parameters are 400s that name them.
func TestInputItems(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &fakeEngine{respond: slowPieces(1, 0, nil)}, Options{})
	input := `[{"role":"developer","content":"be brief"},{"role":"user","content":"one"},` +
		`{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"42"},{"role":"user","content":"two"}]`
	resp, body := post(t, http.DefaultClient, ts.URL+"/v1/responses", `{"model":"tiny","input":`+input+`}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var created struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &created)
	client := backgroundClient(ts.URL)
	ctx := context.Background()
	want := []string{"message:developer:be brief", "message:user:one", "function_call:call_1", "function_call_output:call_1", "message:user:two"}
	describe := func(it responses.ResponseItemUnion) string {
		switch it.Type {
		case "message":
			m := it.AsMessage()
			return "message:" + string(m.Role) + ":" + m.Content[0].Text
		case "function_call":
			return "function_call:" + it.AsFunctionCall().CallID
		case "function_call_output":
			return "function_call_output:" + it.AsFunctionCallOutput().CallID
		}
		return it.Type
	}
	for _, tt := range []struct {
		order responses.InputItemListParamsOrder
		limit int64
	}{{"", 2}, {"asc", 2}, {"asc", 100}, {"desc", 1}} {
		p := responses.InputItemListParams{Order: tt.order, Limit: openai.Int(tt.limit)}
		pager := client.Responses.InputItems.ListAutoPaging(ctx, created.ID, p)
		var got []string
		for pager.Next() {
			got = append(got, describe(pager.Current()))
		}
		if err := pager.Err(); err != nil {
			t.Fatal(err)
		}
		exp := slices.Clone(want)
		if tt.order != "asc" {
			slices.Reverse(exp)
		}
		if !slices.Equal(got, exp) {
			t.Errorf("order %q limit %d: %q, want %q", tt.order, tt.limit, got, exp)
		}
	}
	for _, q := range []string{"limit=0", "limit=101", "order=up", "after=msg_nope"} {
		resp, err := http.Get(ts.URL + "/v1/responses/" + created.ID + "/input_items?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, resp.StatusCode)
		}
	}
}
