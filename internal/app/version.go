package app

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"rill/internal/buildinfo"
)

// Version runs `rill version` with its command-line arguments args: it
// writes the binary's build information to w, one human-readable line, or
// with -json one JSON object (buildinfo.Info's fields). It returns
// flag.ErrHelp after printing the usage for -h.
func Version(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the build information as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	info := buildinfo.Read()
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	_, err := fmt.Fprintln(w, info)
	return err
}
