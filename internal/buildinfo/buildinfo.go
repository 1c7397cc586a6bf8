// Package buildinfo describes the running binary: its version, the commit
// it was built from and the toolchain that built it, for `rill version`,
// the server's first log line and the rill_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the release version stamped by release builds:
//
//	go build -ldflags "-X rill/internal/buildinfo.Version=v1.2.3" ./cmd/rill
//
// When empty, the version is the one the Go toolchain recorded for the main
// module (a pseudo-version from the VCS, or "(devel)").
var Version string

// Revision is the commit stamped by release builds (-X
// rill/internal/buildinfo.Revision=...), used when the toolchain recorded
// none: Go records vcs.revision only for a build inside a VCS checkout
// whose .git is a folder, so not in a git worktree, nor with
// -buildvcs=false.
var Revision string

// Unknown stands for a field the binary does not record (a build outside
// a VCS checkout, or with -buildvcs=false, has no revision).
const Unknown = "unknown"

// Info is what a binary knows of its own build.
type Info struct {
	// Version is the stamped release version, else the main module's.
	Version string `json:"version"`
	// Revision is the VCS commit (vcs.revision), or Unknown.
	Revision string `json:"revision"`
	// Time is the commit's time (vcs.time, RFC 3339), or "" when unknown.
	Time string `json:"time,omitempty"`
	// Modified reports a build from a working tree with uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the toolchain that built the binary, e.g. "go1.26.0".
	GoVersion string `json:"go_version"`
	// OS and Arch are the binary's GOOS and GOARCH.
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(bi, Version, Revision)
}

// fromBuildInfo assembles an Info from what the toolchain recorded (bi, nil
// when the binary has none) and the stamped version and revision (empty
// when none).
func fromBuildInfo(bi *debug.BuildInfo, stamped, revision string) Info {
	if revision == "" {
		revision = Unknown
	}
	info := Info{Version: stamped, Revision: revision, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi == nil {
		if info.Version == "" {
			info.Version = Unknown
		}
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = Unknown
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "GOOS":
			info.OS = s.Value
		case "GOARCH":
			info.Arch = s.Value
		}
	}
	return info
}

// ShortRevision is the first 12 characters of the revision, enough to name
// a commit in a log line or a metric label.
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 && i.Revision != Unknown {
		return i.Revision[:12]
	}
	return i.Revision
}

// String is the human-readable form `rill version` prints, e.g.
//
//	rill v1.2.3 (revision 0123456789ab, 2025-01-02T03:04:05Z, modified) go1.26.0 linux/amd64
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rill %s (revision %s", i.Version, i.ShortRevision())
	if i.Time != "" {
		fmt.Fprintf(&b, ", %s", i.Time)
	}
	if i.Modified {
		b.WriteString(", modified")
	}
	fmt.Fprintf(&b, ") %s %s/%s", i.GoVersion, i.OS, i.Arch)
	return b.String()
}
