package hub

import (
	"slices"
	"strings"
	"testing"
)

func TestPick(t *testing.T) {
	tests := []struct {
		name   string
		files  []string
		quant  string
		want   []string
		errHas string
	}{
		{"Q4_K_M by default", []string{"README.md", "m-Q8_0.gguf", "m-Q4_K_M.gguf"}, "", []string{"m-Q4_K_M.gguf"}, ""},
		{"Q8_0 next", []string{"m-F16.gguf", "m-Q8_0.gguf"}, "", []string{"m-Q8_0.gguf"}, ""},
		{"else the first model", []string{"mmproj-m-f16.gguf", "m-F16.gguf", "m-BF16.gguf"}, "", []string{"m-F16.gguf"}, ""},
		{"asked, any case", []string{"m-Q4_K_M.gguf", "m-q5_k_s.gguf"}, "Q5_K_S", []string{"m-q5_k_s.gguf"}, ""},
		{"Q4_K is not Q4_K_M", []string{"m-Q4_K_M.gguf"}, "Q4_K", nil, "no GGUF file for quantisation Q4_K"},
		{"companions skipped", []string{"m-Q8_0-imatrix.gguf", "mmproj-Q8_0.gguf", "m-Q8_0.gguf"}, "Q8_0", []string{"m-Q8_0.gguf"}, ""},
		{"split: all parts in order", []string{"d/m-Q8_0-00002-of-00002.gguf", "d/m-Q8_0-00001-of-00002.gguf"}, "q8_0",
			[]string{"d/m-Q8_0-00001-of-00002.gguf", "d/m-Q8_0-00002-of-00002.gguf"}, ""},
		{"split: a part missing", []string{"m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf"}, "", nil, "part m-Q8_0-00002-of-00003.gguf is missing"},
		{"no GGUF at all", []string{"README.md", "model.safetensors"}, "", nil, "no GGUF model file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pick(tt.files, tt.quant)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("pick = %v, %v; want an error saying %q", got, err, tt.errHas)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("pick = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		in   string
		want Ref
		ok   bool
	}{
		{"ggml-org/gemma-3-1b-it-GGUF", Ref{Repo: "ggml-org/gemma-3-1b-it-GGUF"}, true},
		{"hf://ggml-org/gemma-3-1b-it-GGUF:Q8_0", Ref{Repo: "ggml-org/gemma-3-1b-it-GGUF", Quant: "Q8_0"}, true},
		{"org/name.v1:q4_k_m", Ref{Repo: "org/name.v1", Quant: "q4_k_m"}, true},
		{"justaname", Ref{}, false},
		{"org/../etc", Ref{}, false},
		{"org/a/b", Ref{}, false},
		{"org/name:", Ref{}, false},
		{"org/name:Q4/x", Ref{}, false},
		{"hf://", Ref{}, false},
	}
	for _, tt := range tests {
		got, err := ParseRef(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestEnv(t *testing.T) {
	tests := []struct {
		env     map[string]string
		cache   string
		offline bool
	}{
		{map[string]string{"HOME": "/h"}, "/h/.cache/huggingface/hub", false},
		{map[string]string{"HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub", false},
		{map[string]string{"HOME": "/h", "XDG_CACHE_HOME": "/x", "HF_HOME": "/hf"}, "/hf/hub", false},
		{map[string]string{"HF_HOME": "/hf", "HF_HUB_CACHE": "/c", "HF_HUB_OFFLINE": "1"}, "/c", true},
		{map[string]string{"HF_HOME": "/hf", "HF_HUB_OFFLINE": "0"}, "/hf/hub", false},
		{map[string]string{"HF_HOME": "/hf", "HF_HUB_OFFLINE": "true"}, "/hf/hub", true},
	}
	for _, tt := range tests {
		o := Env(func(k string) string { return tt.env[k] })
		if o.CacheDir != tt.cache || o.Offline != tt.offline {
			t.Errorf("Env(%v) cache %q offline %v; want %q %v", tt.env, o.CacheDir, o.Offline, tt.cache, tt.offline)
		}
	}
	o := Env(func(k string) string {
		return map[string]string{"HF_ENDPOINT": "http://mirror", "HF_TOKEN": "hf_x", "HF_HOME": "/hf"}[k]
	})
	if o.Endpoint != "http://mirror" || o.Token != "hf_x" {
		t.Errorf("Env endpoint %q token %q", o.Endpoint, o.Token)
	}
}
