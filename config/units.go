package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as Go writes one: "500ms", "5s",
// "2m30s". A bare number is refused: it would be ambiguous.
type Duration time.Duration

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML implements yaml.Unmarshaler. Its errors are type errors,
// so that the decoder goes on and reports every problem of the file.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError("line %d: want a duration such as \"5s\"", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return typeError("line %d: %q is not a duration (want one such as \"500ms\", \"5s\" or \"2m\")", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// typeError is an error the YAML decoder collects instead of stopping at.
func typeError(format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf(format, args...)}}
}

// Bytes is a size in bytes: a plain integer, or a number with a unit —
// KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024); "512MiB".
type Bytes int64

var byteUnits = []struct {
	suffix string
	scale  float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// ParseBytes reads a size as Bytes documents it.
func ParseBytes(s string) (Bytes, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	scale := 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, scale = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size (want bytes, or a number with KB, MB, GB, KiB, MiB or GiB)", s)
	}
	b := v * scale
	if b > math.MaxInt64/2 || b < -math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return Bytes(math.Round(b)), nil
}

// UnmarshalYAML implements yaml.Unmarshaler (type errors, as Duration's).
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError("line %d: want a size such as 512MiB", n.Line)
	}
	v, err := ParseBytes(n.Value)
	if err != nil {
		return typeError("line %d: %v", n.Line, err)
	}
	*b = v
	return nil
}

// String implements flag.Value.
func (b *Bytes) String() string {
	if b == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*b), 10)
}

// Set implements flag.Value: a size as ParseBytes reads it.
func (b *Bytes) Set(s string) error {
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}
