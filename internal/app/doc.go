// Package app is the rill binary's wiring, behind cmd/rill: the serve and
// generate commands parse their flags (or the configuration file), open
// the engines they describe (native models, upstreams, a router over
// them), and serve them through package service with the process's
// logging, listeners and shutdown.
//
// It is the one package that sees both sides: it hands the engines it
// opens to the service as an engine.Engine, and neither learns of the
// other. Serve, Generate, Pull and Version are the commands; Engines and OpenFlags are
// exported for the end-to-end tests (package e2e), which serve what the
// flags open without a process of their own.
package app
