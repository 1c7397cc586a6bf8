package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"rill/engine/gguf"
	"rill/internal/shared"
)

// sharedDir returns the shared data folder, skipping the test when absent.
func sharedDir(t testing.TB) string { return shared.Root(t) }

var modelCache sync.Map // model file name -> *modelResult

type modelResult struct {
	once sync.Once
	tk   *Tokenizer
	err  error
}

// loadModel returns the tokenizer of ../shared/models/name, built once per
// test binary.
func loadModel(t testing.TB, name string) *Tokenizer {
	t.Helper()
	path := filepath.Join(sharedDir(t), "models", name)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("model %s is absent: %v", path, err)
	}
	r, _ := modelCache.LoadOrStore(name, &modelResult{})
	res := r.(*modelResult)
	res.once.Do(func() {
		f, err := gguf.Open(path)
		if err != nil {
			res.err = err
			return
		}
		defer f.Close()
		res.tk, res.err = FromGGUF(f.Metadata)
	})
	if res.err != nil {
		t.Fatalf("load %s: %v", name, res.err)
	}
	return res.tk
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

var models = []string{"stories260K.gguf", "llama-2-tiny-random.gguf"}

// oracleDir is where each model's llama-server recordings live.
func oracleDir(shared, model string) string {
	dir := filepath.Join(shared, "refdata", "llamacpp", "b_oracle")
	if model == "llama-2-tiny-random.gguf" {
		dir = filepath.Join(dir, "llama-2-tiny-random")
	}
	return dir
}

// TestOracleGreedy checks the prompt ids of the greedy oracle (BOS added, as
// llama-server tokenizes prompts) and that the generated ids decode to the
// recorded text.
func TestOracleGreedy(t *testing.T) {
	t.Parallel()
	shared := sharedDir(t)
	var oracle struct {
		Models map[string]map[string]struct {
			PromptIDs    []int  `json:"prompt_ids"`
			GeneratedIDs []int  `json:"generated_ids"`
			Text         string `json:"text"`
			Steps        []struct {
				ID    int    `json:"id"`
				Token string `json:"token"`
			} `json:"steps"`
		} `json:"models"`
	}
	readJSON(t, filepath.Join(shared, "refdata", "llamacpp", "b_oracle", "oracle_greedy_top5.json"), &oracle)
	if len(oracle.Models) != len(models) {
		t.Fatalf("oracle has %d models, want %d", len(oracle.Models), len(models))
	}
	for model, prompts := range oracle.Models {
		tk := loadModel(t, model)
		for prompt, c := range prompts {
			got := tk.Encode(prompt, EncodeOptions{AddSpecial: true, ParseSpecial: true})
			if !slices.Equal(got, c.PromptIDs) {
				t.Errorf("%s: Encode(%q) = %v, want %v", model, prompt, got, c.PromptIDs)
			}
			if got := tk.Decode(c.GeneratedIDs); got != c.Text {
				t.Errorf("%s: Decode(generated for %q) = %q, want %q", model, prompt, got, c.Text)
			}
			d := tk.NewDecoder()
			var streamed strings.Builder
			for i, id := range c.GeneratedIDs {
				streamed.WriteString(d.Add(id))
				if i < len(c.Steps) && string(tk.Piece(id)) != c.Steps[i].Token {
					t.Errorf("%s: Piece(%d) = %q, want %q", model, id, tk.Piece(id), c.Steps[i].Token)
				}
			}
			streamed.WriteString(d.Flush())
			if streamed.String() != c.Text {
				t.Errorf("%s: Decoder over generated for %q = %q, want %q", model, prompt, streamed.String(), c.Text)
			}
		}
	}
}

// TestOracleTokenize replays llama-server's /tokenize recordings.
func TestOracleTokenize(t *testing.T) {
	t.Parallel()
	shared := sharedDir(t)
	n := 0
	for _, model := range models {
		tk := loadModel(t, model)
		dir := oracleDir(shared, model)
		reqs, err := filepath.Glob(filepath.Join(dir, "tokenize_*.request.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, reqPath := range reqs {
			var req struct {
				Content    string `json:"content"`
				AddSpecial bool   `json:"add_special"`
			}
			var body struct {
				Tokens []struct {
					ID    int    `json:"id"`
					Piece string `json:"piece"`
				} `json:"tokens"`
			}
			readJSON(t, reqPath, &req)
			readJSON(t, strings.TrimSuffix(reqPath, ".request.json")+".body", &body)
			var want []int
			for _, tok := range body.Tokens {
				want = append(want, tok.ID)
				// /tokenize renders pieces with special tokens shown.
				piece := string(tk.Piece(tok.ID))
				if tk.Vocab().Types[tok.ID] == Control {
					piece = tk.Vocab().Tokens[tok.ID]
				}
				if piece != tok.Piece {
					t.Errorf("%s: piece of %d = %q, want %q", model, tok.ID, piece, tok.Piece)
				}
			}
			got := tk.Encode(req.Content, EncodeOptions{AddSpecial: req.AddSpecial, ParseSpecial: true})
			if !slices.Equal(got, want) {
				t.Errorf("%s %s: Encode(%q) = %v, want %v", model, filepath.Base(reqPath), req.Content, got, want)
			}
			n++
		}
	}
	if n < 6 {
		t.Errorf("found %d tokenize recordings, want at least 6", n)
	}
}

// TestOracleCompletionPieces checks the generated text and the bytes of every
// generated and top-5 token in llama-server's /completion responses.
func TestOracleCompletionPieces(t *testing.T) {
	t.Parallel()
	shared := sharedDir(t)
	n := 0
	for _, model := range models {
		tk := loadModel(t, model)
		bodies, err := filepath.Glob(filepath.Join(oracleDir(shared, model), "greedy_*.body"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range bodies {
			type prob struct {
				ID  int   `json:"id"`
				Raw []int `json:"bytes"`
			}
			var body struct {
				Content string `json:"content"`
				Tokens  []int  `json:"tokens"`
				Probs   []struct {
					prob
					Top []prob `json:"top_logprobs"`
				} `json:"completion_probabilities"`
			}
			readJSON(t, path, &body)
			if got := tk.Decode(body.Tokens); got != body.Content {
				t.Errorf("%s %s: Decode = %q, want %q", model, filepath.Base(path), got, body.Content)
			}
			check := func(p prob) {
				want := make([]byte, len(p.Raw))
				for i, b := range p.Raw {
					want[i] = byte(b)
				}
				if got := tk.Piece(p.ID); string(got) != string(want) {
					t.Errorf("%s: Piece(%d) = %q, want %q", model, p.ID, got, want)
				}
				n++
			}
			for _, p := range body.Probs {
				check(p.prob)
				for _, top := range p.Top {
					check(top)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no token bytes found in the completion recordings")
	}
}

// golden is testdata/llamacpp_tokenize.json, written by
// scripts/peer/tokenize.mjs from llama.cpp itself (node-llama-cpp 3.21.1).
type golden struct {
	Models map[string]struct {
		NTokens int   `json:"n_tokens"`
		BOS     int   `json:"bos"`
		EOS     int   `json:"eos"`
		AddBOS  bool  `json:"add_bos"`
		AddEOS  bool  `json:"add_eos"`
		EOG     []int `json:"eog"`
		Cases   []struct {
			Text         string `json:"text"`
			ParseSpecial bool   `json:"parse_special"`
			IDs          []int  `json:"ids"`
			Decoded      string `json:"decoded"`
		} `json:"cases"`
	} `json:"models"`
}

func TestGoldenLlamaCpp(t *testing.T) {
	t.Parallel()
	var g golden
	readJSON(t, filepath.Join("testdata", "llamacpp_tokenize.json"), &g)
	if len(g.Models) != len(models) {
		t.Fatalf("golden file has %d models, want %d", len(g.Models), len(models))
	}
	for model, m := range g.Models {
		tk := loadModel(t, model)
		v := tk.Vocab()
		if tk.Size() != m.NTokens || v.BOS != m.BOS || v.EOS != m.EOS || v.AddBOS != m.AddBOS || v.AddEOS != m.AddEOS {
			t.Errorf("%s: size %d bos %d eos %d add_bos %v add_eos %v, llama.cpp has %d %d %d %v %v", model,
				tk.Size(), v.BOS, v.EOS, v.AddBOS, v.AddEOS, m.NTokens, m.BOS, m.EOS, m.AddBOS, m.AddEOS)
		}
		var eog []int
		for id := range tk.Size() {
			if tk.IsEOG(id) {
				eog = append(eog, id)
			}
		}
		if !slices.Equal(eog, m.EOG) {
			t.Errorf("%s: end-of-generation ids %v, llama.cpp has %v", model, eog, m.EOG)
		}
		for _, c := range m.Cases {
			got := tk.Encode(c.Text, EncodeOptions{ParseSpecial: c.ParseSpecial})
			if !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
				t.Errorf("%s: Encode(%q, parse_special=%v) = %v, want %v", model, c.Text, c.ParseSpecial, got, c.IDs)
			}
			// add_special puts BOS (and EOS) around the same ids: llama.cpp's
			// space-prefix rule does not look at BOS.
			want := slices.Clone(c.IDs)
			if m.AddBOS {
				want = append([]int{m.BOS}, want...)
			}
			if m.AddEOS {
				want = append(want, m.EOS)
			}
			if got := tk.Encode(c.Text, EncodeOptions{AddSpecial: true, ParseSpecial: c.ParseSpecial}); !slices.Equal(got, want) {
				t.Errorf("%s: Encode(%q, add_special, parse_special=%v) = %v, want %v", model, c.Text, c.ParseSpecial, got, want)
			}
			if got := tk.Decode(c.IDs); got != c.Decoded {
				t.Errorf("%s: Decode(%v) = %q, want %q", model, c.IDs, got, c.Decoded)
			}
		}
	}
}
