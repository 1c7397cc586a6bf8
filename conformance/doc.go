// Package conformance pins rill's wire contract (docs/design.md §3 and §4) in a
// Ginkgo suite that talks to a server only through its public HTTP and
// WebSocket API, so that it can be pointed at any OpenAI-compatible server.
//
// The suite itself lives in this package's _test.go files: `go test
// ./conformance/...` starts rill in-process on loopback (the native engine on
// the embedded test model, plus a second rill over an engine double for the
// usage-assembly specs that no real model can drive, plus, when ../shared
// is present, a third on a model that reasons), and with
// RILL_CONFORMANCE_URL set it runs against that server instead. See
// docs/conformance.md for the environment variables and labels.
//
// The exported code is the client side the specs are written with:
//
//   - Target and Config: the server under test and the knobs of the suite.
//   - Transcript: everything one streamed request produced, read over SSE
//     (Target.Stream) or WebSocket (Session), framing problems included.
//   - Chunk and Usage: strict decoders that keep "absent" apart from "null".
//   - CheckStream, CheckUsage, CheckDraft, CheckError, ValidateTranscript:
//     the rules as pure functions that return a list of problems, each a
//     sentence naming what the server did differently (for example "chunk 3
//     has no usage key although include_usage is true"), so that a run
//     against another server ends with a readable list of differences.
//   - MessageTranscript, CheckMessageStream, CheckMessagesUsage and
//     CheckMessagesError: the same for Anthropic's Messages API
//     (messages.go, messages_checks.go; docs/design.md §3 rule 13).
//   - ParseEmbeddings, DecodeEmbedding and ProbeEmbeddings: the shape of
//     POST /v1/embeddings answers, float or base64 (embeddings.go).
//   - Probe and ProbeReasoning: what a target can do (WebSocket, prefix
//     cache, drafting, a model that reasons), so
//     that specs it cannot pass for lack of a feature are skipped with the
//     reason, never silently passed.
//
// Everything here is safe for concurrent use unless its doc says otherwise.
package conformance
