package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"rill/engine"
	rwait "rill/internal/wait"
	"rill/service"
)

// The built-in page (GET /) driven in a real headless Chromium: with an API
// key typed in, a prompt streamed over SSE and then over WebSocket (the
// server's access log says which transport carried it), streamed text and
// usage shown, a long stream stopped, and the server's figures filled in
// from /metrics. Any script error or console error fails the test.
//
// Set RILL_PAGE_SCREENSHOT=$PWD/docs/page.png (an absolute path: the test
// runs in e2e/) to write a screenshot of the page at the end (the one the
// README and docs/operating.md show).

const pageKey = "sk-page-test"

// findBrowser returns a Chromium or Chrome on PATH, or "".
func findBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// slowEngine delays every event of requests that ask for more than
// slowAbove tokens, so that the page can stop one while it streams (the
// tiny test model would finish before a click lands). It keeps the load
// report of the engine it wraps.
type slowEngine struct {
	engine.Engine
	delay time.Duration
}

const slowAbove = 1000

func (e slowEngine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	st, err := e.Engine.Generate(ctx, req)
	if err != nil || req.MaxTokens <= slowAbove {
		return st, err
	}
	// A relay that holds each event back for the delay; it ends with the
	// inner stream, which ends when ctx does.
	q := engine.NewQueue(0, nil)
	go func() {
		for {
			ev, err := engine.Recv(st)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				q.End(err)
				return
			}
			select {
			case <-time.After(e.delay):
			case <-ctx.Done():
			}
			q.Push(ev)
		}
	}()
	return q, nil
}

func (e slowEngine) Load() []engine.ModelLoad { return e.Engine.(engine.LoadReporter).Load() }

// logSink keeps the server's log lines.
type logSink struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func TestPageInBrowser(t *testing.T) {
	browser := findBrowser()
	if browser == "" {
		t.Skip("no Chromium on PATH (chromium, chromium-browser or google-chrome): apt-get install chromium to run the browser test")
	}
	if testing.Short() {
		t.Skip("starts a browser")
	}
	e := startFlags(t, slog.New(slog.DiscardHandler), "--model-id", "rill-tiny", "--draft-model", "embedded", "--threads", "1")
	var serverLog logSink
	base := listen(t, service.New(service.Options{Engine: slowEngine{e, 20 * time.Millisecond}, APIKey: pageKey,
		Logger: slog.New(slog.NewJSONHandler(&serverLog, nil))}))

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// Without these Chromium reaches for the network on its own, which
		// this machine does not have.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()

	// Script errors: uncaught exceptions, unhandled rejections, console
	// errors and browser log errors (a CSP violation, say). Network errors
	// are left out: the 401 of the page's first look at /v1/models without a
	// key is expected, and the page says so itself.
	var mu sync.Mutex
	var scriptErrors []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if (m.Type == chromedp.ConsoleError || m.IsException()) && m.Source != "network" {
				mu.Lock()
				scriptErrors = append(scriptErrors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()
	checkScript := func(when string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, e := range scriptErrors {
			t.Errorf("script error %s: %s", when, e)
		}
		scriptErrors = nil
	}
	step := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v\nserver log:\n%s", what, err, serverLog.String())
		}
	}
	wait := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond),
				chromedp.WithPollingTimeout(20*time.Second))(ctx, tg)
			if err != nil {
				return fmt.Errorf("waiting for %s: %w", expr, err)
			}
			return nil
		})
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	const (
		answers = `document.querySelectorAll('[data-testid=output] .msg.assistant')`
		lastAns = `[...` + answers + `].at(-1)`
	)
	// answerDone is true when the n-th answer has streamed text and its usage.
	answerDone := func(n int) string {
		return fmt.Sprintf(`%s.length === %d && %s.querySelector('.text').textContent.length > 0 && `+
			`%s.querySelector('[data-testid=answer-usage]').textContent.includes('completion') && `+
			`!%s.classList.contains('streaming')`, answers, n, lastAns, lastAns, lastAns)
	}

	// The key: without it the page says one is needed.
	step("open the page",
		chromedp.Navigate(base+"/"),
		wait(`document.querySelector('[data-testid=error]').textContent.includes('API key')`),
	)
	step("type the API key",
		chromedp.SendKeys(chromedp.CSS(`[data-testid=api-key]`), pageKey),
		chromedp.Focus(chromedp.CSS(`[data-testid=prompt]`)), // the key field's change event
		wait(`document.querySelector('[data-testid=model]').value === 'rill-tiny'`),
		wait(`document.querySelector('[data-testid=error]').hidden`),
	)
	checkScript("before the first prompt")

	// SSE.
	step("send over SSE",
		chromedp.SendKeys(chromedp.CSS(`[data-testid=prompt]`), "Tell me about the river."),
		chromedp.Click(chromedp.CSS(`[data-testid=send]`)),
		wait(answerDone(1)),
		wait(`!document.querySelector('[data-testid=usage] [data-field=prompt]').textContent.includes('–')`),
	)
	if got := text(`[data-testid=usage] [data-field=completion]`); got == "–" || got == "0" {
		t.Errorf("usage panel: completion %q", got)
	}
	for _, field := range []string{"cached", "accepted", "rejected"} {
		if got := text(`[data-testid=usage] [data-field=` + field + `]`); got == "–" {
			t.Errorf("usage panel: %s not shown for a caching, drafting model", field)
		}
	}
	if got := text(`[data-testid=usage] [data-field=reasoning]`); got != "–" {
		t.Errorf("usage panel: reasoning %q for a model that does not reason", got)
	}
	checkScript("streaming over SSE")

	// WebSocket, the key as the subprotocol.
	step("send over WebSocket",
		chromedp.Click(chromedp.CSS(`input[name=transport][value=ws]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=prompt]`), "And the mill?"),
		chromedp.Click(chromedp.CSS(`[data-testid=send]`)),
		wait(answerDone(2)),
	)
	if !strings.Contains(serverLog.String(), `"request_id":"page-1","method":"GET","path":"/v1/chat/completions","transport":"websocket"`) {
		t.Errorf("the second answer did not come over WebSocket; server log:\n%s", serverLog.String())
	}
	checkScript("streaming over WebSocket")

	// Stop a long stream, over WebSocket and then over SSE.
	for i, mode := range []string{"ws", "sse"} {
		n := 3 + i
		step("stop a stream over "+mode,
			chromedp.Click(chromedp.CSS(`input[name=transport][value=`+mode+`]`)),
			chromedp.SetValue(chromedp.CSS(`[data-testid=max-tokens]`), "1200"),
			chromedp.SendKeys(chromedp.CSS(`[data-testid=prompt]`), "A long story, please."),
			chromedp.Click(chromedp.CSS(`[data-testid=send]`)),
			wait(fmt.Sprintf(`%s.length === %d && %s.querySelector('.text').textContent.length > 0`, answers, n, lastAns)),
			chromedp.Click(chromedp.CSS(`[data-testid=stop]`)),
			wait(fmt.Sprintf(`%s.length === %d && %s.classList.contains('stopped')`, answers, n, lastAns)),
			wait(`!document.querySelector('[data-testid=send]').disabled`),
		)
	}
	checkScript("stopping streams")
	// The server let go of them: nothing running.
	step("server figures",
		wait(`document.querySelector('[data-testid=server] [data-field=running]').textContent === '0'`),
		wait(`document.querySelector('[data-testid=server] [data-field=cache-hit]').textContent.includes('%')`),
		wait(`document.querySelector('[data-testid=server] [data-field=draft-accept]').textContent.includes('%')`),
		wait(`document.querySelector('[data-testid=server] [data-field=kv]').textContent.includes('%')`),
	)
	// The engine lets go of a cancelled request (the gauge above) before
	// its handler writes the access line: give the line a moment.
	cancelled := func() int { return strings.Count(serverLog.String(), `"status":499`) }
	rwait.Until(func() bool { return cancelled() >= 2 })
	if got := cancelled(); got != 2 {
		t.Errorf("%d requests ended as cancelled (499) in the server log, want the 2 stopped", got)
	}

	// One more answer, for the screenshot: the figures of a finished run.
	step("a last answer",
		chromedp.SetValue(chromedp.CSS(`[data-testid=max-tokens]`), "48"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=prompt]`), "Tell me about the river again."),
		chromedp.Click(chromedp.CSS(`[data-testid=send]`)),
		wait(answerDone(5)),
		wait(`document.querySelector('[data-testid=server] [data-field=ttft]').textContent.includes('ms')`),
	)
	checkScript("at the end")
	if path := os.Getenv("RILL_PAGE_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
