package service

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"rill/store"
)

// brokenStore is a store out of reach: every call fails.
type brokenStore struct{ store.Store }

var errUnreachable = errors.New("store unreachable")

func (brokenStore) PutResponse(context.Context, store.Response) error { return errUnreachable }
func (brokenStore) GetResponse(context.Context, string) (store.Response, error) {
	return store.Response{}, errUnreachable
}
func (brokenStore) ResponseByItem(context.Context, string) (store.Response, error) {
	return store.Response{}, errUnreachable
}
func (brokenStore) DeleteResponse(context.Context, string) error { return errUnreachable }
func (brokenStore) Lineage(context.Context, string, int) ([]store.Response, error) {
	return nil, errUnreachable
}
func (brokenStore) PutStream(context.Context, store.Stream) error { return errUnreachable }
func (brokenStore) GetStream(context.Context, string) (store.Stream, error) {
	return store.Stream{}, errUnreachable
}

// TestResponsesStoreUnreachable: a store that fails costs what needs it
// (each a 503 store_unavailable, retryable) and nothing else: a response is
// still answered although it could not be stored.
func TestResponsesStoreUnreachable(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, &fakeEngine{respond: slowPieces(2, 0, nil)}, Options{Store: brokenStore{}})
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"create", "POST", "/v1/responses", `{"model":"tiny","input":"x"}`, http.StatusOK},
		{"previous_response_id", "POST", "/v1/responses", `{"model":"tiny","input":"x","previous_response_id":"resp_1"}`, http.StatusServiceUnavailable},
		{"item_reference", "POST", "/v1/responses", `{"model":"tiny","input":[{"type":"item_reference","id":"msg_1"}]}`, http.StatusServiceUnavailable},
		{"background", "POST", "/v1/responses", `{"model":"tiny","input":"x","background":true}`, http.StatusServiceUnavailable},
		{"resumable", "POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"resumable":true}}`, http.StatusServiceUnavailable},
		{"GET", "GET", "/v1/responses/resp_1", ``, http.StatusServiceUnavailable},
		{"DELETE", "DELETE", "/v1/responses/resp_1", ``, http.StatusServiceUnavailable},
		{"input_items", "GET", "/v1/responses/resp_1/input_items", ``, http.StatusServiceUnavailable},
		{"resume", "GET", "/v1/chat/completions/chatcmpl-1", ``, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("%d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status == http.StatusServiceUnavailable {
				if resp.Header.Get("Retry-After") == "" {
					t.Error("no Retry-After")
				}
				var b strings.Builder
				buf := make([]byte, 4096)
				n, _ := resp.Body.Read(buf)
				b.Write(buf[:n])
				if !strings.Contains(b.String(), `"store_unavailable"`) {
					t.Errorf("body %s", b.String())
				}
			}
		})
	}
}
