// Package e2e holds rill's end-to-end tests, and nothing else: the engines
// that `rill serve` opens from its flags (package app), served by package
// service on real loopback HTTP servers, driven by real clients (the
// official openai-go client, WebSockets, a Prometheus parser, headless
// Chromium for the built-in page). They check what no one package can:
// tool calls and JSON constrained by the grammar through the wire, the
// Responses API's reasoning and tools, metrics against the requests that
// made them, overload, a real BPE vocabulary against llama.cpp's prompts,
// many streams at once.
//
// The conformance suite (package conformance) is the black-box check of
// the API contract; these tests may look inside (the engines, their
// tokenizers) to check what the wire alone cannot show.
package e2e
