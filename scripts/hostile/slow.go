package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// headerTimeout is rill serve's ReadHeaderTimeout.
const headerTimeout = 10 * time.Second

// readTimeout is the shared server's --read-timeout.
const readTimeout = 2 * time.Second

// dial opens a raw connection to the shared server.
func dial(h *harness) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	return d.Dial("tcp", h.srv.addr)
}

// slowHeaders is one slowloris client: how it sends its headers.
type slowHeaders struct {
	name string
	// send writes to conn until the server hangs up (or gives up at d).
	send func(conn net.Conn, h *harness)
}

// checkSlowloris holds 3 × 40 connections that never finish their headers
// (silent, half a request line, a header byte a second): the server must
// hang up on each within its 10 s header timeout, answering nothing or a
// 4xx, and keep serving everyone else meanwhile.
func checkSlowloris(ctx context.Context, h *harness) (string, error) {
	const perKind = 40
	kinds := []slowHeaders{
		{"silent", func(net.Conn, *harness) {}},
		{"half a request line", func(c net.Conn, _ *harness) { _, _ = c.Write([]byte("POST /v1/chat/comp")) }},
		{"a header byte a second", func(c net.Conn, h *harness) {
			_, _ = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\n", h.srv.addr)
			for range 30 {
				if _, err := c.Write([]byte("X")); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}},
	}
	type result struct {
		kind   string
		closed time.Duration
		answer string
		err    error
	}
	results := make(chan result, perKind*len(kinds))
	var wg sync.WaitGroup
	for _, k := range kinds {
		for range perKind {
			wg.Go(func() {
				conn, err := dial(h)
				if err != nil {
					results <- result{kind: k.name, err: err}
					return
				}
				defer conn.Close()
				start := time.Now()
				go k.send(conn, h)
				_ = conn.SetReadDeadline(start.Add(headerTimeout + 10*time.Second))
				got, err := io.ReadAll(conn)
				r := result{kind: k.name, closed: time.Since(start), answer: firstLine(got)}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					r.err = fmt.Errorf("still open after %v", r.closed.Round(time.Second))
				}
				results <- r
			})
		}
	}
	// Meanwhile the server serves: a completion within the header timeout.
	time.Sleep(time.Second)
	servedStart := time.Now()
	_, servedErr := complete(ctx, h, chat())
	served := time.Since(servedStart)
	wg.Wait()
	close(results)
	var fails []string
	var slowest time.Duration
	answers := map[string]int{}
	for r := range results {
		slowest = max(slowest, r.closed)
		answers[r.answer]++
		switch {
		case r.err != nil:
			fails = append(fails, r.kind+": "+r.err.Error())
		case r.closed > headerTimeout+3*time.Second:
			fails = append(fails, fmt.Sprintf("%s: closed after %v", r.kind, r.closed.Round(100*time.Millisecond)))
		case r.answer != "" && !is4xx(r.answer):
			fails = append(fails, r.kind+": answered "+r.answer)
		}
	}
	var ans []string
	for a, n := range answers {
		if a == "" {
			a = "nothing"
		}
		ans = append(ans, fmt.Sprintf("%d× %s", n, a))
	}
	figures := fmt.Sprintf("%d conns, all closed by %v (%s); a completion meanwhile took %v", perKind*len(kinds),
		slowest.Round(100*time.Millisecond), strings.Join(ans, ", "), served.Round(time.Millisecond))
	if servedErr != nil {
		fails = append(fails, "the completion meanwhile: "+servedErr.Error())
	}
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(dedupe(fails), "\n"))
	}
	return figures, nil
}

// firstLine is the status line of a raw answer, "" for none.
func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	return string(line)
}

// is4xx reports whether a status line says 4xx.
func is4xx(statusLine string) bool {
	f := strings.Fields(statusLine)
	return len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/") && len(f[1]) == 3 && f[1][0] == '4'
}

// dedupe keeps the first of equal lines and counts the others.
func dedupe(lines []string) []string {
	seen := map[string]int{}
	var out []string
	for _, l := range lines {
		if seen[l] == 0 {
			out = append(out, l)
		}
		seen[l]++
	}
	for i, l := range out {
		if n := seen[l]; n > 1 {
			out[i] = fmt.Sprintf("%s (×%d)", l, n)
		}
	}
	return out
}

// slowBody is a client that sends its headers and then too little body.
type slowBody struct {
	name    string
	headers string // after the request line and Host
	send    func(conn net.Conn)
}

// checkSlowBodies is defect 1 and its kin: bodies that never complete.
// Each must be answered 408 request_timeout in OpenAI's shape after
// --read-timeout (2 s), and its connection closed.
func checkSlowBodies(ctx context.Context, h *harness) (string, error) {
	body := chat()
	kinds := []slowBody{
		{"one chunk, then nothing", "Transfer-Encoding: chunked\r\n", func(c net.Conn) {
			_, _ = fmt.Fprintf(c, "%x\r\n%s\r\n", 10, body[:10])
		}},
		{"nothing after the headers", fmt.Sprintf("Content-Length: %d\r\n", len(body)), func(net.Conn) {}},
		{"a byte every 300 ms", fmt.Sprintf("Content-Length: %d\r\n", len(body)), func(c net.Conn) {
			for i := range body {
				if _, err := c.Write(body[i : i+1]); err != nil {
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
		}},
		{"Expect: 100-continue, no body", fmt.Sprintf("Expect: 100-continue\r\nContent-Length: %d\r\n", len(body)), func(net.Conn) {}},
		{"a chunk every 300 ms", "Transfer-Encoding: chunked\r\n", func(c net.Conn) {
			for i := range body {
				if _, err := fmt.Fprintf(c, "1\r\n%c\r\n", body[i]); err != nil {
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
		}},
	}
	var mu sync.Mutex
	var fails, figs []string
	var wg sync.WaitGroup
	for _, k := range kinds {
		wg.Go(func() {
			took, err := slowBodyOnce(h, k)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fails = append(fails, k.name+": "+err.Error())
				return
			}
			figs = append(figs, fmt.Sprintf("%s %v", k.name, took.Round(100*time.Millisecond)))
		})
	}
	wg.Wait()
	figures := "408 after: " + strings.Join(figs, "; ")
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

// slowBodyOnce sends one slow body and judges the answer: a 408 in
// OpenAI's shape within the read timeout (and 3 s of slack), then the
// connection closed.
func slowBodyOnce(h *harness, k slowBody) (time.Duration, error) {
	conn, err := dial(h)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%s\r\n",
		h.srv.addr, h.srv.apiKey, k.headers)
	if err != nil {
		return 0, err
	}
	go k.send(conn)
	_ = conn.SetReadDeadline(start.Add(readTimeout + 15*time.Second))
	br := bufio.NewReader(conn)
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			return time.Since(start), fmt.Errorf("no answer: %w", err)
		}
		if resp.StatusCode != http.StatusContinue {
			break
		}
	}
	took := time.Since(start)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		return took, fmt.Errorf("status %d after %v, want 408: %s", resp.StatusCode, took.Round(100*time.Millisecond), clipQ(got))
	}
	if err := errorShape(got); err != nil {
		return took, err
	}
	if took > readTimeout+3*time.Second {
		return took, fmt.Errorf("408 only after %v", took.Round(100*time.Millisecond))
	}
	if _, err := br.ReadByte(); err == nil || isTimeout(err) {
		return took, fmt.Errorf("the connection stays open after the 408 (%v)", err)
	}
	return took, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// checkProtocolGarbage sends requests net/http itself refuses before rill
// sees them (a broken request line, a 2 MiB header, a bad chunk size, …):
// a 4xx from net/http (plain text: rill's handler never runs) or a closed
// connection, never a 5xx nor a hang.
func checkProtocolGarbage(ctx context.Context, h *harness) (string, error) {
	host := "Host: " + h.srv.addr + "\r\nAuthorization: Bearer " + h.srv.apiKey + "\r\n"
	body := string(chat())
	// want is the status net/http answers (0: any 4xx); 505 and 501 are
	// what HTTP prescribes for an unknown version or transfer coding.
	cases := []struct {
		name, raw string
		want      int
	}{
		{"not HTTP", "GARBAGE\r\n\r\n", 0},
		{"binary", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 0},
		{"HTTP/9.9", "GET /health HTTP/9.9\r\n" + host + "\r\n", 505},
		{"no Host", "GET /health HTTP/1.1\r\n\r\n", 0},
		{"header without colon", "GET /health HTTP/1.1\r\n" + host + "NoColonHere\r\n\r\n", 0},
		{"2 MiB header", "GET /health HTTP/1.1\r\n" + host + "X-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n", 431},
		{"negative Content-Length", "POST /v1/chat/completions HTTP/1.1\r\n" + host + "Content-Length: -5\r\n\r\n", 0},
		{"two Content-Lengths", "POST /v1/chat/completions HTTP/1.1\r\n" + host + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 0},
		{"bad chunk size", "POST /v1/chat/completions HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + "\r\n0\r\n\r\n", 0},
		{"Content-Length and chunked", "POST /v1/chat/completions HTTP/1.1\r\n" + host + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0},
		{"unknown Transfer-Encoding", "POST /v1/chat/completions HTTP/1.1\r\n" + host + "Transfer-Encoding: bogus\r\n\r\n" + body, 501},
		{"absolute-form URL to elsewhere", "GET http://evil.example/v1/models HTTP/1.1\r\n" + host + "\r\n", 403},
	}
	var fails []string
	answers := map[string]int{}
	for _, c := range cases {
		conn, err := dial(h)
		if err != nil {
			return "", err
		}
		_ = conn.SetDeadline(time.Now().Add(headerTimeout + 5*time.Second))
		_, _ = io.WriteString(conn, c.raw)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		switch {
		case isTimeout(err):
			fails = append(fails, c.name+": no answer, and the connection still open")
			answers["hang"]++
		case err != nil:
			answers["closed"]++
		case c.want != 0 && resp.StatusCode != c.want, c.want == 0 && resp.StatusCode/100 != 4:
			fails = append(fails, fmt.Sprintf("%s: %s", c.name, resp.Status))
			answers[fmt.Sprint(resp.StatusCode)]++
		default:
			answers[fmt.Sprint(resp.StatusCode)]++
		}
	}
	var figs []string
	for a, n := range answers {
		figs = append(figs, fmt.Sprintf("%d× %s", n, a))
	}
	sort.Strings(figs)
	figures := fmt.Sprintf("%d requests: %s", len(cases), strings.Join(figs, ", "))
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}
