// Command rill is an OpenAI-compatible LLM server with its own CPU engine.
//
//	rill [serve] [flags]       run the server (the default command)
//	rill generate [flags]      run one prompt on the native engine and print it
//	rill pull ORG/REPO[:QUANT] download a GGUF from the Hugging Face Hub
//	rill version [-json]       print the version, commit and toolchain
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"rill/internal/app"
)

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args[0] = "version"
	}
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "serve":
		err = app.Serve(ctx, args)
	case "generate":
		err = app.Generate(ctx, args)
	case "pull":
		err = app.Pull(ctx, args)
	case "version":
		err = app.Version(args, os.Stdout)
	case "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "rill: unknown command %q\n", cmd)
		usage()
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rill %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  rill [serve] [flags]    run the OpenAI-compatible server (default command)
  rill generate [flags]   generate from one prompt and print tokens/s
  rill pull [flags] ORG/REPO[:QUANT]
                          download a GGUF model from the Hugging Face Hub
                          into its cache and print its path
  rill version [-json]    print the version, commit and Go toolchain
                          (also rill --version)
Run "rill <command> -h" for the flags of a command.
`)
}
