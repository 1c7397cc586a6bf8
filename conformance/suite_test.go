package conformance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"rill/conformance"
)

// TestConformance runs the suite. Its semantics are fixed here so that a
// plain `go test` has them: random spec order, pending specs fail, and a
// label filter that selects nothing fails.
func TestConformance(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	suiteConfig.RandomizeAllSpecs = true
	suiteConfig.FailOnPending = true
	suiteConfig.FailOnEmpty = true
	RunSpecs(t, "rill conformance", suiteConfig, reporterConfig)
}

// target is a server under test with what it was found to support.
type target struct {
	*conformance.Target
	caps conformance.Capabilities
	// responses: what the target does of the Responses API (responses_test.go).
	responses responsesCaps
	// messages: what the target does of Anthropic's Messages API (messages_test.go).
	messages messagesCaps
}

// suiteEnv is what BeforeSuite sets up. It is written once, before any
// spec runs, and only read afterwards; per-spec state lives in closures.
type suiteEnv struct {
	cfg conformance.Config
	// inProcess: the suite started rill itself, so rill's exact rules apply
	// (a prefix cache is required, not merely probed).
	inProcess bool
	main      *target
	// double is rill over the engine double; nil against another server,
	// doubleSkip then says why.
	double     *target
	doubleSkip string
	// reasoning serves a model that reasons (in-process: a second rill
	// with a real vocabulary from ../shared); nil: reasoningSkip says why.
	reasoning     *target
	reasoningSkip string
	// embedder serves a model that embeds (in-process: a rill on the tiny
	// qwen3 embedder); nil: embedderSkip says why.
	embedder     *target
	embedderSkip string
}

var env *suiteEnv

var _ = BeforeSuite(func(ctx SpecContext) {
	cfg, err := conformance.ConfigFromEnv()
	Expect(err).NotTo(HaveOccurred())
	e := &suiteEnv{cfg: cfg, inProcess: cfg.InProcess()}
	broken := os.Getenv(envBroken)
	if e.inProcess {
		r, err := startRill(cfg, broken)
		Expect(err).NotTo(HaveOccurred(), "start rill in-process")
		DeferCleanup(r.stop)
		d, err := startDouble()
		Expect(err).NotTo(HaveOccurred(), "start rill over the engine double")
		DeferCleanup(d.stop)
		e.main = &target{Target: r.target}
		e.double = &target{Target: d.target}
		rr, why, err := startReasoning()
		Expect(err).NotTo(HaveOccurred(), "start rill with a reasoning model")
		if rr != nil {
			DeferCleanup(rr.stop)
			e.reasoning = &target{Target: rr.target}
		}
		e.reasoningSkip = why
		er, err := startEmbedder(broken)
		Expect(err).NotTo(HaveOccurred(), "start rill with an embedding model")
		DeferCleanup(er.stop)
		e.embedder = &target{Target: er.target}
	} else {
		Expect(broken).To(BeEmpty(), "%s applies to the in-process rill only; unset %s or %s", envBroken, envBroken, conformance.EnvURL)
		e.main = &target{Target: conformance.NewTarget(cfg.URL, cfg.Model, cfg.APIKey)}
		e.doubleSkip = "the fractional-count specs need rill's usage assembly over an engine double; " + conformance.EnvURL + " points elsewhere"
	}
	if cfg.Model != "" {
		e.main.Model = cfg.Model
	}
	Expect(e.main.ResolveModel(ctx)).To(Succeed(), "target %s", e.main.BaseURL)
	e.main.caps, err = conformance.Probe(ctx, e.main.Target)
	Expect(err).NotTo(HaveOccurred(), "probe %s", e.main.BaseURL)
	e.main.responses = probeResponses(ctx, e.main.Target, e.main.caps.CacheMeasured)
	e.main.messages = probeMessages(ctx, e.main.Target)
	switch {
	case e.reasoning != nil:
		// The in-process reasoning model must reason: probed, not assumed.
		ok, why := conformance.ProbeReasoning(ctx, e.reasoning.Target, e.reasoning.Model)
		Expect(ok).To(BeTrue(), "the in-process reasoning model: %s", why)
		e.reasoning.caps.WebSocket, e.reasoning.caps.WebSocketReason = conformance.ProbeWebSocket(ctx, e.reasoning.Target)
	case !e.inProcess:
		model := cfg.ReasoningModel
		if model == "" {
			model = e.main.Model
		}
		if ok, why := conformance.ProbeReasoning(ctx, e.main.Target, model); ok {
			t := *e.main.Target
			t.Model = model
			e.reasoning = &target{Target: &t, caps: e.main.caps}
		} else {
			e.reasoningSkip = why
		}
	}
	if e.reasoning != nil {
		e.reasoning.responses = probeResponses(ctx, e.reasoning.Target, e.reasoning.caps.CacheMeasured)
		e.reasoning.messages = probeMessages(ctx, e.reasoning.Target)
	}
	e.embedder, e.embedderSkip = findEmbedder(ctx, e)
	if d := e.double; d != nil {
		// The double's prompts are scripts, so only its transport is probed.
		d.caps.WebSocket, d.caps.WebSocketReason = conformance.ProbeWebSocket(ctx, d.Target)
	}
	AddReportEntry("target", fmt.Sprintf("%s model %q (in-process: %v, block size %d, draft k %d, broken mode %q); %s",
		e.main.BaseURL, e.main.Model, e.inProcess, cfg.BlockSize, cfg.DraftK, broken, e.main.caps))
	if r := e.main.responses; r.sharedReason == "" {
		AddReportEntry("responses", fmt.Sprintf("fresh inputs share %d tokens", r.shared))
	} else {
		AddReportEntry("responses", "fresh inputs share: unknown ("+r.sharedReason+")")
	}
	if e.reasoning != nil {
		AddReportEntry("reasoning target", fmt.Sprintf("%s model %q", e.reasoning.BaseURL, e.reasoning.Model))
	} else {
		AddReportEntry("reasoning target", "none: "+e.reasoningSkip)
	}
	if e.embedder != nil {
		AddReportEntry("embedding target", fmt.Sprintf("%s model %q", e.embedder.BaseURL, e.embedder.Model))
	} else {
		AddReportEntry("embedding target", "none: "+e.embedderSkip)
	}
	env = e
})

// transportCase is one transport with its label.
type transportCase struct {
	tr    conformance.Transport
	label string
}

var transports = []transportCase{{conformance.SSE, "sse"}, {conformance.WebSocket, "websocket"}}

var endpoints = []conformance.Endpoint{conformance.Chat, conformance.Completions}

// via is one way to send a request and read its usage: a plain POST or a
// stream (with include_usage) over one transport.
type via struct {
	name  string
	tc    *transportCase // nil: not streamed
	label []string
}

var vias = []via{
	{name: "without stream"},
	{name: "streamed over SSE", tc: &transports[0], label: []string{"sse"}},
	{name: "streamed over WebSocket", tc: &transports[1], label: []string{"websocket"}},
}

// usage sends body (asking for n choices) the way v says and returns the
// request's usage, after checking the response or stream.
func (v via) usage(ctx context.Context, t *target, ep conformance.Endpoint, body map[string]any, n int) *conformance.Usage {
	GinkgoHelper()
	if v.tc == nil {
		_, u := post(ctx, t, ep, body)
		return u
	}
	return finalUsage(stream(ctx, *v.tc, t, ep, merge(body, withUsage())), n)
}

// send is usage that also returns, per choice, the log-probability entries
// the answer carried and the finish reasons.
func (v via) send(ctx context.Context, t *target, ep conformance.Endpoint, body map[string]any, n int) (*conformance.Usage, []int, []string) {
	GinkgoHelper()
	var tokens []int
	var finish []string
	var err error
	var u *conformance.Usage
	if v.tc == nil {
		var raw []byte
		raw, u = post(ctx, t, ep, body)
		tokens, finish, err = conformance.ResponseChoiceTokens(raw, n)
	} else {
		tr := stream(ctx, *v.tc, t, ep, merge(body, withUsage()))
		u = finalUsage(tr, n)
		tokens, finish, err = tr.ChoiceTokens(n)
	}
	Expect(err).NotTo(HaveOccurred())
	return u, tokens, finish
}

// stream sends body over tc to t and returns the transcript, skipping the
// spec when the target has no WebSocket.
func stream(ctx context.Context, tc transportCase, t *target, ep conformance.Endpoint, body map[string]any) *conformance.Transcript {
	GinkgoHelper()
	if tc.tr == conformance.WebSocket && !t.caps.WebSocket {
		Skip(t.caps.WebSocketReason)
	}
	tr, err := tc.tr.Stream(ctx, t.Target, ep.Path, body)
	Expect(err).NotTo(HaveOccurred(), "%s %s", tc.tr.Name(), ep.Path)
	expectNone(conformance.ValidateTranscript(tr, ep), "%s %s chunks against openapi.yaml", tc.tr.Name(), ep.Path)
	return tr
}

// post sends a non-streamed request that must succeed and validate, and
// returns its body and usage.
func post(ctx context.Context, t *target, ep conformance.Endpoint, body map[string]any) ([]byte, *conformance.Usage) {
	GinkgoHelper()
	r, err := t.Post(ctx, ep.Path, body)
	Expect(err).NotTo(HaveOccurred())
	Expect(r.Status).To(Equal(200), "POST %s answered %d: %s", ep.Path, r.Status, r.Body)
	expectNone(conformance.ValidateResponse(ep.Response, r.Body), "POST %s against openapi.yaml", ep.Path)
	key, u, err := conformance.ResponseUsage(r.Body)
	Expect(err).NotTo(HaveOccurred(), "POST %s usage", ep.Path)
	Expect(key).To(Equal(conformance.Object), "a non-streamed POST %s response must carry a usage object; usage is %s", ep.Path, key)
	expectNone(conformance.CheckUsage(u), "POST %s usage", ep.Path)
	return r.Body, u
}

// finalUsage returns the usage of a stream that must be valid with
// include_usage true and n choices.
func finalUsage(tr *conformance.Transcript, n int) *conformance.Usage {
	GinkgoHelper()
	expectNone(conformance.CheckStream(tr, conformance.StreamWant{IncludeUsage: true, Choices: n}), "%s stream", tr.Transport)
	u, err := tr.FinalUsage()
	Expect(err).NotTo(HaveOccurred())
	return u
}

// maxListed bounds the problems one failure lists.
const maxListed = 12

// expectNone fails when there are problems, listing each on its own line.
func expectNone(problems []string, format string, args ...any) {
	GinkgoHelper()
	if len(problems) == 0 {
		return
	}
	shown := problems[:min(len(problems), maxListed)]
	msg := fmt.Sprintf(format, args...) + ": the target differs from the contract:\n  - " + strings.Join(shown, "\n  - ")
	if more := len(problems) - len(shown); more > 0 {
		msg += fmt.Sprintf("\n  … and %d more", more)
	}
	Fail(msg)
}

// withUsage returns the stream_options member that asks for usage.
func withUsage() map[string]any {
	return map[string]any{"stream_options": map[string]any{"include_usage": true}}
}

// merge returns the union of maps; later ones win.
func merge(ms ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// prompt returns a fresh prompt for one spec: a nonce first, so that no
// cache has seen any prefix of it (beyond what a chat template adds).
func prompt() string { return conformance.ProbePrompt(conformance.Nonce()) }

// shortPrompt is a fresh prompt of a few tokens.
func shortPrompt() string { return conformance.ShortProbePrompt(conformance.Nonce()) }

// pretty formats a JSON document for failure messages.
func pretty(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}
