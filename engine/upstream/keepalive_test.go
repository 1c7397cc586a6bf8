package upstream_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"rill/engine"
	"rill/engine/upstream"
)

// oneShotServer answers the first request of each connection and drops
// the connection when the client sends a second one on it, as llama.cpp's
// server drops keep-alive connections after some answers: a client that
// reuses an idle connection gets EOF for a request the server never read.
func oneShotServer(t *testing.T, body string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				if req, err := http.ReadRequest(br); err == nil {
					io.Copy(io.Discard, req.Body) // read, never answered
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestTokenizeSurvivesDroppedKeepAlive: a tokenizer request that meets a
// keep-alive connection the upstream dropped is sent again on a new one,
// as generation requests are, rather than failing with EOF.
func TestTokenizeSurvivesDroppedKeepAlive(t *testing.T) {
	t.Parallel()
	url := oneShotServer(t, `{"tokens":[1,2,3]}`)
	e := newUpstream(t, "m", upstream.LlamaCpp, url)
	for i := range 4 {
		res, err := e.Tokenize(context.Background(), &engine.TokenizeRequest{Model: "m", Prompt: "abc"})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if len(res.Tokens) != 3 {
			t.Fatalf("request %d: tokens %v", i, res.Tokens)
		}
	}
}
