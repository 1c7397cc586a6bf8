package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "rill", Version: "v0.0.0-20250102030405-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "darwin"},
			{Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2025-01-02T03:04:05Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name    string
		bi      *debug.BuildInfo
		stamped string
		rev     string
		want    Info
	}{
		{"vcs build", vcs, "", "", Info{
			Version: "v0.0.0-20250102030405-0123456789ab+dirty", Revision: "0123456789abcdef0123456789abcdef01234567",
			Time: "2025-01-02T03:04:05Z", Modified: true, GoVersion: "go1.99.1", OS: "darwin", Arch: "arm64"}},
		{"stamped release wins over the module version; the recorded revision over the stamped", vcs, "v1.2.3", "fedcba", Info{
			Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567",
			Time: "2025-01-02T03:04:05Z", Modified: true, GoVersion: "go1.99.1", OS: "darwin", Arch: "arm64"}},
		{"no vcs settings", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "rill", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "false"}}}, "", "", Info{
			Version: "(devel)", Revision: Unknown, GoVersion: "go1.99.1", OS: runtime.GOOS, Arch: runtime.GOARCH}},
		{"no vcs settings, stamped revision", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "rill", Version: "(devel)"}},
			"v1.0.0", "fedcba", Info{Version: "v1.0.0", Revision: "fedcba", GoVersion: "go1.99.1", OS: runtime.GOOS, Arch: runtime.GOARCH}},
		{"no build info", nil, "", "", Info{Version: Unknown, Revision: Unknown, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}},
		{"no build info, stamped", nil, "v2.0.0", "fedcba", Info{Version: "v2.0.0", Revision: "fedcba", GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fromBuildInfo(tt.bi, tt.stamped, tt.rev); got != tt.want {
				t.Errorf("fromBuildInfo = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		info Info
		want string
	}{
		{Info{Version: "v1.2.3", Revision: "0123456789abcdef0123", Time: "2025-01-02T03:04:05Z", Modified: true,
			GoVersion: "go1.26.0", OS: "linux", Arch: "amd64"},
			"rill v1.2.3 (revision 0123456789ab, 2025-01-02T03:04:05Z, modified) go1.26.0 linux/amd64"},
		{Info{Version: "(devel)", Revision: Unknown, GoVersion: "go1.26.0", OS: "darwin", Arch: "arm64"},
			"rill (devel) (revision unknown) go1.26.0 darwin/arm64"},
	}
	for _, tt := range tests {
		if got := tt.info.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}
