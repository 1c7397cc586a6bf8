package native

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"rill/engine"
	"rill/engine/gguf"
	"rill/engine/model"
	"rill/engine/promptcache"
	"rill/engine/quant"
	"rill/engine/testmodel"
)

// diskPrompt is a prompt of a few hundred tokens without repeats, so that
// each of its blocks has tokens of its own.
func diskPrompt() string {
	var b strings.Builder
	for i := range 120 {
		fmt.Fprintf(&b, "step %d of the fox, ", i)
	}
	return b.String()
}

// openDiskEngine starts an engine on the test model with the disk tier in
// dir; stop it with Close.
func openDiskEngine(t *testing.T, dir string) *Engine {
	t.Helper()
	pc, err := promptcache.Open(dir, promptcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return newTestEngine(t, Options{PromptCache: pc})
}

// TestDiskTierAcrossRestarts serves a prompt, closes the engine (which
// saves its cache), and serves it again from a new engine on the same
// directory: the prompt's whole blocks count as cached and the greedy
// output is that of a cold run. Then it damages block files and checks
// that they are refused and recomputed, with the same output.
func TestDiskTierAcrossRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prompt := diskPrompt()
	req := func(e *Engine) *engine.Request {
		return &engine.Request{Model: e.Models()[0].ID, Prompt: prompt, MaxTokens: 12}
	}
	cold := newTestEngine(t, Options{})
	want := collect(t, cold, req(cold))
	var tokens []int32
	for _, tok := range cold.tok.Encode(prompt, encodeWithBOS) {
		tokens = append(tokens, int32(tok))
	}
	full := (len(tokens) - 1) / 16 * 16
	if full < 5*16 {
		t.Fatalf("the prompt has %d tokens: too short for the test", len(tokens))
	}

	run := func(t *testing.T, e *Engine) (cached int, text string) {
		t.Helper()
		r := collect(t, e, req(e))
		e.Close()
		return int(*r.final[0].Stats.CachedTokens), r.text[0]
	}
	if cached, _ := run(t, openDiskEngine(t, dir)); cached != 0 {
		t.Fatalf("first run: cached %d, want 0", cached)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.kvb"))
	if len(files) < full/16 {
		t.Fatalf("%d block files after the first engine closed, want at least %d", len(files), full/16)
	}

	e := openDiskEngine(t, dir)
	cached, text := run(t, e)
	if cached != full || text != want.text[0] {
		t.Fatalf("after a restart: cached %d, want %d; text %q, want %q", cached, full, text, want.text[0])
	}
	if n := e.disk.loaded.Load(); n != int64(full/16) {
		t.Fatalf("%d blocks loaded, want %d", n, full/16)
	}

	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		block  int // the prompt's block damaged
	}{
		{"flipped byte in the third block", flipByte, 2},
		{"truncated first block", func(t *testing.T, path string) { os.Truncate(path, 100) }, 0},
		{"foreign fifth block", func(t *testing.T, path string) { foreign(t, path) }, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.damage(t, blockFile(t, dir, tokens[16*tt.block:16*tt.block+16]))
			e := openDiskEngine(t, dir)
			cached, text := run(t, e)
			if cached != 16*tt.block || text != want.text[0] {
				t.Fatalf("cached %d, want %d; text %q, want %q", cached, 16*tt.block, text, want.text[0])
			}
			if e.disk.refused.Load() != 1 {
				t.Fatalf("%d blocks refused, want 1", e.disk.refused.Load())
			}
			// The engine computed the block again and saved it at Close.
			if cached, _ := run(t, openDiskEngine(t, dir)); cached != full {
				t.Fatalf("the next restart: cached %d, want %d", cached, full)
			}
		})
	}
}

// blockFile returns the block file in dir that holds toks.
func blockFile(t *testing.T, dir string, toks []int32) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.kvb"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(data) < 36 {
			continue
		}
		// The header (see promptcache): identity length at 8, token
		// count at 12, tokens after the 36-byte header and the identity.
		idLen, n := int(binary.LittleEndian.Uint32(data[8:])), int(binary.LittleEndian.Uint32(data[12:]))
		at := 36 + idLen
		got := make([]int32, n)
		for i := range got {
			got[i] = int32(binary.LittleEndian.Uint32(data[at+4*i:]))
		}
		if slices.Equal(got, toks) {
			return f
		}
	}
	t.Fatal("no block file holds the tokens")
	return ""
}

func flipByte(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// foreign replaces the block file at path with the same block of another
// model (the test model with F16 weights), written under the same name.
func foreign(t *testing.T, path string) {
	data, err := testmodel.Bytes(testmodel.Target(quant.F16))
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	other := t.TempDir()
	pc, err := promptcache.Open(other, promptcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var h uint64
	fmt.Sscanf(filepath.Base(path)[17:33], "%016x", &h)
	s := pc.Scope("model=" + m.Fingerprint() + " kv=the same layout")
	if err := s.Put(h, promptcache.Block{Tokens: make([]int32, 16), Data: make([]byte, 1024)}); err != nil {
		t.Fatal(err)
	}
	src, _ := filepath.Glob(filepath.Join(other, "*.kvb"))
	if err := os.Rename(src[0], path); err != nil {
		t.Fatal(err)
	}
}

// TestDiskTierKeepsEvictedBlocks serves two prompts through a KV cache that
// holds one of them, with blocks saved only when evicted (as when the
// queue was full when they were computed): the first one's blocks, evicted
// by the second, are written behind the loop and loaded back when the
// first prompt returns.
func TestDiskTierKeepsEvictedBlocks(t *testing.T) {
	t.Parallel()
	pc, err := promptcache.Open(t.TempDir(), promptcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, Options{PromptCache: pc, KVCacheBytes: 100 * 8192})
	e.disk.writeThrough = false // only evictions are saved
	if e.cache.NumBlocks() != 100 {
		t.Fatalf("%d blocks, want 100: the test model's block size changed", e.cache.NumBlocks())
	}
	id := e.Models()[0].ID
	a, b := diskPrompt(), strings.ReplaceAll(diskPrompt(), "fox", "owl")
	first := collect(t, e, &engine.Request{Model: id, Prompt: a, MaxTokens: 8})
	collect(t, e, &engine.Request{Model: id, Prompt: b, MaxTokens: 8})
	// Wait for the loop to release b's blocks (after its last event)
	// and for the writer to write every block queued.
	for range 500 {
		d := e.disk
		if e.Stats().Cache.BlocksUsed == 0 && d.queued.Load() > 0 && d.saved.Load()+d.failed.Load() == d.queued.Load() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	tokens := len(e.tok.Encode(a, encodeWithBOS))
	again := collect(t, e, &engine.Request{Model: id, Prompt: a, MaxTokens: 8})
	got := int(*again.final[0].Stats.CachedTokens)
	if got != (tokens-1)/16*16 || again.text[0] != first.text[0] {
		t.Fatalf("the evicted prompt again: cached %d of %d, text %q, want %q (loaded %d saved %d dropped %d refused %d)", got, tokens, again.text[0], first.text[0], e.disk.loaded.Load(), e.disk.saved.Load(), e.disk.dropped.Load(), e.disk.refused.Load())
	}
	if e.disk.loaded.Load() == 0 {
		t.Fatal("nothing loaded from disk")
	}
}

// TestDiskTierCloseIsBounded closes an engine whose save cannot finish in
// its time: Close returns, and what reached the disk reads back whole.
func TestDiskTierCloseIsBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pc, err := promptcache.Open(dir, promptcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, Options{PromptCache: pc, PromptCacheSaveTime: time.Nanosecond})
	for i := range 4 {
		collect(t, e, &engine.Request{Model: e.Models()[0].ID, Prompt: fmt.Sprint(i, diskPrompt()), MaxTokens: 2})
	}
	start := time.Now()
	e.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	// Whatever was written is whole: a new engine reads it or refuses
	// nothing.
	e2 := openDiskEngine(t, dir)
	collect(t, e2, &engine.Request{Model: e2.Models()[0].ID, Prompt: fmt.Sprint(0, diskPrompt()), MaxTokens: 2})
	if n := e2.disk.refused.Load(); n != 0 {
		t.Fatalf("%d blocks refused after a cut-short save", n)
	}
}

// TestDiskTierSurvivesACrash: blocks go to disk as soon as they are
// computed, so an engine that never closes (a process killed) leaves its
// prompt's blocks behind once the writer has caught up.
func TestDiskTierSurvivesACrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prompt := diskPrompt()
	e := openDiskEngine(t, dir)
	first := collect(t, e, &engine.Request{Model: e.Models()[0].ID, Prompt: prompt, MaxTokens: 8})
	d := e.disk
	for range 500 {
		if d.queued.Load() > 0 && d.saved.Load()+d.failed.Load() == d.queued.Load() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// e stays open, as if killed: nothing is saved at a Close.
	e2 := openDiskEngine(t, dir)
	again := collect(t, e2, &engine.Request{Model: e2.Models()[0].ID, Prompt: prompt, MaxTokens: 8})
	tokens := len(e2.tok.Encode(prompt, encodeWithBOS))
	if got := int(*again.final[0].Stats.CachedTokens); got != (tokens-1)/16*16 || again.text[0] != first.text[0] {
		t.Fatalf("after a crash: cached %d of %d, text %q, want %q", got, tokens, again.text[0], first.text[0])
	}
}
