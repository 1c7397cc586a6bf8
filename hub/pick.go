package hub

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// defaultQuants are tried in order when a reference names no quantisation,
// as llama.cpp does; then the first model GGUF is taken.
var defaultQuants = []string{"Q4_K_M", "Q8_0"}

// splitName matches the parts of a split GGUF: "name-00001-of-00003.gguf".
var splitName = regexp.MustCompile(`-(\d{5})-of-(\d{5})\.gguf$`)

// isModelGGUF reports whether p is a GGUF of a model's weights, not one of
// the companions a repository carries beside it (projectors, importance
// matrices, draft heads).
func isModelGGUF(p string) bool {
	if !strings.HasSuffix(strings.ToLower(p), ".gguf") {
		return false
	}
	base := strings.ToLower(path.Base(p))
	for _, s := range []string{"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"} {
		if strings.Contains(base, s) {
			return false
		}
	}
	return true
}

// splitInfo returns a split GGUF's part index and count; 1, 1 for a file
// that is not split.
func splitInfo(p string) (index, count int) {
	m := splitName.FindStringSubmatch(p)
	if m == nil {
		return 1, 1
	}
	index, _ = strconv.Atoi(m[1])
	count, _ = strconv.Atoi(m[2])
	return index, count
}

// pick chooses, among a repository's file paths, the files of the model
// GGUF whose name carries quant ("" for the defaults): one file, or every
// part of a split GGUF in order. The match is case-insensitive and wants
// the quantisation followed by '.' or '-' (Q4_K is not Q4_K_M).
func pick(files []string, quant string) ([]string, error) {
	tags := defaultQuants
	if quant != "" {
		tags = []string{quant}
	}
	first := ""
	for _, tag := range tags {
		re := regexp.MustCompile(`(?i)` + regexp.QuoteMeta(tag) + `[.-]`)
		for _, f := range files {
			if isModelGGUF(f) && re.MatchString(path.Base(f)) {
				if i, _ := splitInfo(f); i == 1 {
					first = f
					break
				}
			}
		}
		if first != "" {
			break
		}
	}
	if first == "" && quant == "" {
		for _, f := range files {
			if i, _ := splitInfo(f); isModelGGUF(f) && i == 1 {
				first = f
				break
			}
		}
	}
	if first == "" {
		var ggufs []string
		for _, f := range files {
			if isModelGGUF(f) {
				ggufs = append(ggufs, f)
			}
		}
		if len(ggufs) == 0 {
			return nil, fmt.Errorf("no GGUF model file among the repository's %d files", len(files))
		}
		return nil, fmt.Errorf("no GGUF file for quantisation %s; the repository has %s", quant, strings.Join(ggufs, ", "))
	}
	_, count := splitInfo(first)
	if count == 1 {
		return []string{first}, nil
	}
	have := make(map[string]bool, len(files))
	for _, f := range files {
		have[f] = true
	}
	stem := first[:len(first)-len("-00001-of-00000.gguf")]
	parts := make([]string, count)
	for i := range parts {
		parts[i] = fmt.Sprintf("%s-%05d-of-%05d.gguf", stem, i+1, count)
		if !have[parts[i]] {
			return nil, fmt.Errorf("split GGUF %s: part %s is missing", first, parts[i])
		}
	}
	return parts, nil
}
