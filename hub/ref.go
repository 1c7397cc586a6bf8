package hub

import (
	"fmt"
	"regexp"
	"strings"
)

// Scheme prefixes a model reference that names a Hub repository instead of
// a local file: "hf://org/repo[:quant]".
const Scheme = "hf://"

// Ref names a model on the Hub: a repository and, optionally, the
// quantisation to pick among its GGUF files.
type Ref struct {
	// Repo is "org/name".
	Repo string
	// Quant is matched, case-insensitively, against the GGUF file names
	// (e.g. Q4_K_M, Q8_0); empty picks Q4_K_M, then Q8_0, then the first.
	Quant string
}

// String is the reference as ParseRef reads it.
func (r Ref) String() string {
	if r.Quant == "" {
		return r.Repo
	}
	return r.Repo + ":" + r.Quant
}

// IsRef reports whether s is a Hub reference ("hf://...") rather than a path.
func IsRef(s string) bool {
	return strings.HasPrefix(s, Scheme)
}

var (
	repoPart  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	quantPart = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

// ParseRef reads "org/repo[:quant]", with or without the hf:// prefix.
func ParseRef(s string) (Ref, error) {
	body := strings.TrimPrefix(s, Scheme)
	repo, quant, hasQuant := strings.Cut(body, ":")
	org, name, ok := strings.Cut(repo, "/")
	switch {
	case !ok || !repoPart.MatchString(org) || !repoPart.MatchString(name) ||
		strings.Contains(repo, "..") || strings.HasSuffix(repo, "."):
		return Ref{}, fmt.Errorf("hub reference %q: want ORG/REPO[:QUANT], e.g. ggml-org/gemma-3-1b-it-GGUF:Q4_K_M", s)
	case hasQuant && !quantPart.MatchString(quant):
		return Ref{}, fmt.Errorf("hub reference %q: quantisation %q: want letters, digits, '_', '-' or '.' (e.g. Q4_K_M)", s, quant)
	}
	return Ref{Repo: repo, Quant: quant}, nil
}
