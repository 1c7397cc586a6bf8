package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"rill/engine/quant"
	"rill/engine/testmodel"
)

// ggufMap locates the parts of a valid GGUF file that the corruptions
// bend: a walk of its header, metadata and tensor infos.
type ggufMap struct {
	kvs        map[string]ggufKV // by key
	firstKey   int               // offset of the first key's length
	tensors    []ggufTensor
	infosEnd   int // where the tensor infos end
	dataOffset int // where the tensor data starts (aligned)
}

type ggufKV struct {
	typePos  int // the value type (u32)
	valuePos int // the value
	// For an array: its element type and count.
	elemTypePos, countPos, firstElemPos int
}

type ggufTensor struct {
	nDimsPos, dimsPos, typePos, offsetPos int
}

// walkGGUF maps data, a well-formed GGUF v3 file.
func walkGGUF(data []byte) (*ggufMap, error) {
	m := &ggufMap{kvs: map[string]ggufKV{}}
	le := binary.LittleEndian
	pos := 24
	nTensors, nKV := int(le.Uint64(data[8:])), int(le.Uint64(data[16:]))
	str := func() string {
		n := int(le.Uint64(data[pos:]))
		s := string(data[pos+8 : pos+8+n])
		pos += 8 + n
		return s
	}
	sizes := map[uint32]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
	var skip func(typ uint32) error
	skip = func(typ uint32) error {
		if n, ok := sizes[typ]; ok {
			pos += n
			return nil
		}
		switch typ {
		case 8:
			str()
			return nil
		case 9:
			et := le.Uint32(data[pos:])
			count := int(le.Uint64(data[pos+4:]))
			pos += 12
			for range count {
				if err := skip(et); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("type %d", typ)
	}
	m.firstKey = pos
	alignment := 32
	for range nKV {
		key := str()
		kv := ggufKV{typePos: pos, valuePos: pos + 4}
		typ := le.Uint32(data[pos:])
		if typ == 9 {
			kv.elemTypePos, kv.countPos, kv.firstElemPos = pos+4, pos+8, pos+16
		}
		pos += 4
		if key == "general.alignment" {
			alignment = int(le.Uint32(data[pos:]))
		}
		if err := skip(typ); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		m.kvs[key] = kv
	}
	for range nTensors {
		str()
		t := ggufTensor{nDimsPos: pos}
		nd := int(le.Uint32(data[pos:]))
		t.dimsPos = pos + 4
		pos += 4 + 8*nd
		t.typePos, t.offsetPos = pos, pos+4
		pos += 12
		m.tensors = append(m.tensors, t)
	}
	m.infosEnd = pos
	m.dataOffset = (pos + alignment - 1) / alignment * alignment
	return m, nil
}

// corruptGGUF is one bad model file.
type corruptGGUF struct {
	name string
	data []byte
	// mayLoad marks a file that need not be refused (a flip in a token's
	// text is harmless; a NaN hyperparameter makes a useless model, which
	// the loader does not check): if it loads, it must serve requests
	// without a 5xx or a panic.
	mayLoad bool
}

// corruptGGUFs bends the embedded test model in every part of its format,
// and adds seeded random byte flips of its header and metadata.
func corruptGGUFs(random int) ([]corruptGGUF, error) {
	good, err := testmodel.Bytes(testmodel.Target(quant.F32))
	if err != nil {
		return nil, err
	}
	m, err := walkGGUF(good)
	if err != nil {
		return nil, fmt.Errorf("walking the test model: %w", err)
	}
	le := binary.LittleEndian
	bend := func(name string, f func(b []byte) []byte) corruptGGUF {
		return corruptGGUF{name: name, data: f(append([]byte(nil), good...))}
	}
	put32 := func(pos int, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { le.PutUint32(b[pos:], v); return b }
	}
	put64 := func(pos int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte { le.PutUint64(b[pos:], v); return b }
	}
	kv := func(key string) ggufKV {
		k, ok := m.kvs[key]
		if !ok {
			panic("the test model has no " + key)
		}
		return k
	}
	arch := string(good[kv("general.architecture").valuePos+8:][:5])
	t0 := m.tensors[0]
	addBOS := func(b []byte) []byte { b[kv("tokenizer.ggml.add_bos_token").valuePos] = 1; return b }
	out := []corruptGGUF{
		{name: "empty file", data: nil},
		{name: "3 bytes", data: []byte("GGU")},
		{name: "header only", data: good[:24]},
		bend("bad magic", func(b []byte) []byte { copy(b, "GGUX"); return b }),
		bend("version 99", put32(4, 99)),
		bend("version 0", put32(4, 0)),
		bend("2^62 tensors", put64(8, 1<<62)),
		bend("2^62 metadata keys", put64(16, 1<<62)),
		bend("key of 2^62 bytes", put64(m.firstKey, 1<<62)),
		bend("value type 99", put32(kv("general.architecture").typePos, 99)),
		bend("2^40 tokens", put64(kv("tokenizer.ggml.tokens").countPos, 1<<40)),
		bend("token array of type 99", put32(kv("tokenizer.ggml.tokens").elemTypePos, 99)),
		bend("first token of 2^40 bytes", put64(kv("tokenizer.ggml.tokens").firstElemPos, 1<<40)),
		bend("unknown architecture", func(b []byte) []byte {
			copy(b[kv("general.architecture").valuePos+8:], "xyzzy")
			return b
		}),
		bend("context length 0", put32(kv(arch+".context_length").valuePos, 0)),
		bend("context length 2^32-1", put32(kv(arch+".context_length").valuePos, 1<<32-1)),
		bend("0 attention heads", put32(kv(arch+".attention.head_count").valuePos, 0)),
		bend("0 KV heads", put32(kv(arch+".attention.head_count_kv").valuePos, 0)),
		bend("0 layers", put32(kv(arch+".block_count").valuePos, 0)),
		bend("embedding length 0", put32(kv(arch+".embedding_length").valuePos, 0)),
		bend("head count 3 (64 not divisible)", put32(kv(arch+".attention.head_count").valuePos, 3)),
		bend("KV head count 3 (4 heads)", put32(kv(arch+".attention.head_count_kv").valuePos, 3)),
		bend("feed-forward length 2^31", put32(kv(arch+".feed_forward_length").valuePos, 1<<31)),
		bend("rope dimensions 0", put32(kv(arch+".rope.dimension_count").valuePos, 0)),
		bend("rope dimensions 1,000", put32(kv(arch+".rope.dimension_count").valuePos, 1000)),
		bend("rope base NaN", put32(kv(arch+".rope.freq_base").valuePos, 0x7fc00000)),
		bend("RMS epsilon NaN", put32(kv(arch+".attention.layer_norm_rms_epsilon").valuePos, 0x7fc00000)),
		bend("RMS epsilon -1", put32(kv(arch+".attention.layer_norm_rms_epsilon").valuePos, 0xbf800000)),
		bend("BOS token 2^30", func(b []byte) []byte { return addBOS(put32(kv("tokenizer.ggml.bos_token_id").valuePos, 1<<30)(b)) }),
		bend("EOS token 2^32-1", put32(kv("tokenizer.ggml.eos_token_id").valuePos, 1<<32-1)),
		bend("EOT token 2^31", put32(kv("tokenizer.ggml.eot_token_id").valuePos, 1<<31)),
		bend("unknown tokenizer model", func(b []byte) []byte {
			v := kv("tokenizer.ggml.model").valuePos
			n := int(le.Uint64(b[v:]))
			copy(b[v+8:v+8+n], strings.Repeat("z", n))
			return b
		}),
		bend("broken chat template", func(b []byte) []byte {
			v := kv("tokenizer.chat_template").valuePos
			copy(b[v+8:], "{%%%%")
			return b
		}),
		bend("tensor of 1,000 dimensions", put32(t0.nDimsPos, 1000)),
		bend("tensor dimension 2^40", put64(t0.dimsPos, 1<<40)),
		bend("tensor dimension 0", put64(t0.dimsPos, 0)),
		bend("tensor of type 999", put32(t0.typePos, 999)),
		bend("tensor offset beyond the file", put64(t0.offsetPos, 1<<40)),
		bend("tensor offset misaligned", put64(t0.offsetPos, le.Uint64(good[t0.offsetPos:])+1)),
		{name: "truncated after the tensor infos", data: good[:m.infosEnd]},
		{name: "truncated halfway through the data", data: good[:m.dataOffset+(len(good)-m.dataOffset)/2]},
		{name: "one byte short", data: good[:len(good)-1]},
	}
	if len(m.tensors) > 1 {
		t1 := m.tensors[1]
		out = append(out, bend("two tensors at one offset", put64(t1.offsetPos, le.Uint64(good[t0.offsetPos:]))))
	}
	r := rand.New(rand.NewPCG(12, 34))
	for i := range random {
		b := append([]byte(nil), good...)
		for range 8 {
			b[r.IntN(m.infosEnd)] ^= byte(1 + r.IntN(255))
		}
		out = append(out, corruptGGUF{name: fmt.Sprintf("random flips #%d", i), data: b, mayLoad: true})
	}
	for i := range out {
		switch out[i].name {
		case "rope base NaN", "RMS epsilon NaN", "RMS epsilon -1", "BOS token 2^30", "EOS token 2^32-1",
			"EOT token 2^31", "broken chat template":
			out[i].mayLoad = true
		}
	}
	return out, nil
}

// refusal is how a rill process that must refuse to start ended.
type refusal struct {
	code    int
	took    time.Duration
	maxRSS  int64 // KiB, sampled (a process that exits within milliseconds may show less)
	output  string
	started bool // it listened: it accepted the input
	// probe is what a process that started answered to requests sent to
	// it: "" when every one got a 200 or a 4xx, else what went wrong.
	probe string
}

// probeRequests are sent to a broken model that loaded anyway: it must
// answer them, or refuse them with a 4xx, and never fail with a 5xx or a
// panic (logprobs over NaN logits once panicked the engine's step).
var probeRequests = []struct{ path, body string }{
	{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"logprobs":true,"top_logprobs":5}`},
	{"/v1/completions", `{"model":"m","prompt":"Once","max_tokens":8,"logprobs":5,"stream":true}`},
	{"/v1/completions", `{"model":"m","prompt":"Once","max_tokens":8,"temperature":0.7,"top_p":0.9,"n":2}`},
}

// probe sends probeRequests to c, whose one model it reads from /v1/models.
func probe(ctx context.Context, c *child) string {
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Get(c.url("/v1/models"))
	if err != nil {
		return err.Error()
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || len(models.Data) != 1 {
		return fmt.Sprintf("/v1/models: %v", err)
	}
	for _, p := range probeRequests {
		body := strings.Replace(p.body, `"model":"m"`, `"model":`+jsonString(models.Data[0].ID), 1)
		got, err := post(ctx, client, c, p.path, []byte(body), http.StatusOK)
		if err != nil && !strings.Contains(err.Error(), "status 4") {
			return fmt.Sprintf("%s: %v", p.path, err)
		}
		if bytes.Contains(got, []byte(`"error"`)) {
			return fmt.Sprintf("%s: %s", p.path, clipQ(got))
		}
	}
	return ""
}

// runRefused runs rill serve with args and waits for it to exit (up to
// 30 s); a process that listens is stopped.
func runRefused(ctx context.Context, bin string, args ...string) (refusal, error) {
	start := time.Now()
	c, err := startChild(ctx, childOptions{bin: bin, args: append([]string{"--addr", "127.0.0.1:0"}, args...)})
	if err != nil {
		return refusal{}, err
	}
	var r refusal
	// The peak RSS is sampled from VmHWM while the process lives: the
	// rusage of a forked child counts the parent's memory at the fork.
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if st, err := readProc(c.pid()); err == nil && st.hwmKB > peak.Load() {
				peak.Store(st.hwmKB)
			}
			select {
			case <-c.exited:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	deadline := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case <-c.exited:
			done = true
		case <-deadline:
			c.kill()
			return refusal{output: c.tail(5)}, fmt.Errorf("still running after 30 s: %s", c.tail(3))
		case <-time.After(50 * time.Millisecond):
			c.mu.Lock()
			listening := c.addr != ""
			c.mu.Unlock()
			if listening {
				r.started = true
				r.probe = probe(ctx, c)
				c.stop(10 * time.Second)
				done = true
			}
		}
	}
	r.took = time.Since(start)
	r.output = strings.Join(c.log(), "\n")
	if bad := logProblems(c.log()); r.started && len(bad) > 0 && r.probe == "" {
		r.probe = "log: " + clipQ([]byte(bad[0]))
	}
	<-sampled
	r.maxRSS = peak.Load()
	if st := c.cmd.ProcessState; st != nil {
		r.code = st.ExitCode()
	}
	return r, nil
}

// clearRefusal says what is wrong with r as a refusal to start: it must
// exit 1 with one line "rill serve: …" and no panic.
func clearRefusal(r refusal) string {
	switch {
	case r.started:
		return "it started serving"
	case strings.Contains(r.output, "panic") || strings.Contains(r.output, "goroutine "):
		return "panicked: " + clipQ([]byte(r.output))
	case r.code != 1:
		return fmt.Sprintf("exit status %d: %s", r.code, clipQ([]byte(r.output)))
	case !strings.Contains(r.output, "rill serve: "):
		return "no error line: " + clipQ([]byte(r.output))
	}
	return ""
}

// checkCorruptGGUFs starts rill serve on each corrupt model (and as a
// draft model): each must exit 1 with a clear error line, no panic, in
// seconds and bounded memory. Random flips may also load (a flip in a
// token's text is harmless); they only must not panic or hang.
func checkCorruptGGUFs(ctx context.Context, h *harness) (string, error) {
	models, err := corruptGGUFs(40)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(h.tmp, "gguf")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	type job struct {
		name  string
		args  []string
		loose bool // may start
	}
	var jobs []job
	for i, m := range models {
		path := filepath.Join(dir, fmt.Sprintf("bad-%02d.gguf", i))
		if err := os.WriteFile(path, m.data, 0o644); err != nil {
			return "", err
		}
		jobs = append(jobs, job{m.name, []string{"--model", path}, m.mayLoad})
		if i == 3 || i == 10 {
			jobs = append(jobs, job{m.name + " as the draft model", []string{"--draft-model", path}, false})
		}
	}
	jobs = append(jobs,
		job{"a directory", []string{"--model", dir}, false},
		job{"a missing file", []string{"--model", filepath.Join(dir, "missing.gguf")}, false},
	)
	var mu sync.Mutex
	var fails []string
	var slowest time.Duration
	var maxRSS int64
	maxRSSName := ""
	started, refused := 0, 0
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r, err := runRefused(ctx, h.bin, j.args...)
			mu.Lock()
			defer mu.Unlock()
			slowest = max(slowest, r.took)
			if r.maxRSS > maxRSS {
				maxRSS, maxRSSName = r.maxRSS, j.name
			}
			switch {
			case err != nil:
				fails = append(fails, j.name+": "+err.Error())
			case j.loose && r.started:
				started++
				if r.probe != "" {
					fails = append(fails, j.name+": loaded, then "+r.probe)
				}
			case j.loose && r.code == 1 && !strings.Contains(r.output, "panic"):
				refused++
			default:
				if f := clearRefusal(r); f != "" {
					fails = append(fails, j.name+": "+f)
				} else {
					refused++
				}
			}
			if r.maxRSS > 512<<10 {
				fails = append(fails, fmt.Sprintf("%s: peak RSS %d MiB", j.name, r.maxRSS>>10))
			}
		})
	}
	wg.Wait()
	figures := fmt.Sprintf("%d files: %d refused, %d loaded and served; slowest %v, peak RSS %d MiB (%s)", len(jobs), refused, started,
		slowest.Round(10*time.Millisecond), maxRSS>>10, maxRSSName)
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}

// brokenConfig is a configuration file and the errors its refusal must
// list, all at once.
type brokenConfig struct {
	name, file string
	content    string
	want       []string
	args       []string // more flags
}

func brokenConfigs(dir string) []brokenConfig {
	return []brokenConfig{
		{name: "eleven errors at once", file: "many.yaml", content: `models:
  - id: a
    native: {model: embedded, kv_cache_mem: 12XB, bogus: 1}
  - id: a
    upstream: {kind: nope, replicas: []}
  - native: {model: embedded}
    colour: red
  - id: c
    upstream:
      kind: vllm
      api_key_env: HOSTILE_UNSET_VAR
  - id: d
    upstream: {kind: vllm, replicas: [{url: "::bad"}], timeouts: {connect: fast}}
extra: 1
`, want: []string{"12XB", "bogus", "colour", `"fast"`, "extra", `id "a" is also`, `unknown kind "nope"`,
			"models[1] (a): upstream.replicas", "id is required", "HOSTILE_UNSET_VAR", "::bad"}},
		{name: "not YAML", file: "garbage.yaml", content: "{{{ ][ :::\n\t- -", want: []string{"garbage.yaml"}},
		{name: "JSON syntax error", file: "bad.json", content: `{"models": [{"id": "x",}]}`, want: []string{"bad.json"}},
		{name: "empty file", file: "empty.yaml", content: "", want: []string{"empty.yaml"}},
		{name: "no models", file: "none.yaml", content: "models: []\n", want: []string{"none.yaml"}},
		{name: "models a string", file: "str.yaml", content: "models: lots\n", want: []string{"str.yaml"}},
		{name: "a billion laughs", file: "laughs.yaml", content: billionLaughs(), want: []string{"laughs.yaml"}},
		{name: "a corrupt native model", file: "corrupt.yaml", content: "models:\n  - id: broken\n    native: {model: " +
			filepath.Join(dir, "bad-03.gguf") + "}\n", want: []string{`model "broken"`, "GGUF"}},
		{name: "three missing model files", file: "missing3.yaml", content: "models:\n  - id: broken\n    native: {model: " +
			filepath.Join(dir, "bad-03.gguf") + "}\n  - id: gone\n    native: {model: nowhere.gguf}\n" +
			"  - id: gone2\n    native: {model: embedded, draft_model: nodraft.gguf}\n  - id: folder\n    native: {model: " + dir + "}\n",
			want: []string{"nowhere.gguf", "nodraft.gguf", "is not a file"}},
		{name: "config with model flags", file: "ok.yaml", content: "models:\n  - id: t\n    native: {model: embedded}\n",
			args: []string{"--ctx", "512", "--kv-cache-mem", "1MiB"}, want: []string{"--ctx", "--kv-cache-mem"}},
		{name: "a missing file", file: "", want: []string{"missing.yaml"}},
	}
}

// billionLaughs is YAML whose aliases expand to 10^9 strings.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		fmt.Fprintf(&b, "%s: &%s [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	fmt.Fprintf(&b, "models: *%s\n", prev)
	return b.String()
}

// checkBrokenConfigs starts rill serve --config on each broken file: exit
// 1, every error of the file listed at once, no panic, in bounded time and
// memory.
func checkBrokenConfigs(ctx context.Context, h *harness) (string, error) {
	dir := filepath.Join(h.tmp, "gguf") // the corrupt models, when that case ran
	cdir := filepath.Join(h.tmp, "config")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "bad-03.gguf")); err != nil {
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, "bad-03.gguf"), []byte("GGUXnot a model"), 0o644)
	}
	var fails []string
	var slowest time.Duration
	var maxRSS int64
	configs := brokenConfigs(dir)
	for _, c := range configs {
		path := filepath.Join(cdir, "missing.yaml")
		if c.file != "" {
			path = filepath.Join(cdir, c.file)
			if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
				return "", err
			}
		}
		r, err := runRefused(ctx, h.bin, append([]string{"--config", path}, c.args...)...)
		if err != nil {
			fails = append(fails, c.name+": "+err.Error())
			continue
		}
		slowest, maxRSS = max(slowest, r.took), max(maxRSS, r.maxRSS)
		if f := clearRefusal(r); f != "" {
			fails = append(fails, c.name+": "+f)
			continue
		}
		var missing []string
		for _, w := range c.want {
			if !strings.Contains(r.output, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			fails = append(fails, fmt.Sprintf("%s: the error does not mention %q: %s", c.name, missing, clipQ([]byte(r.output))))
		}
		if r.maxRSS > 256<<10 {
			fails = append(fails, fmt.Sprintf("%s: peak RSS %d MiB", c.name, r.maxRSS>>10))
		}
	}
	figures := fmt.Sprintf("%d files, each refused with all its errors; slowest %v, peak RSS %d MiB", len(configs),
		slowest.Round(10*time.Millisecond), maxRSS>>10)
	if len(fails) > 0 {
		return figures, errors.New(strings.Join(fails, "\n"))
	}
	return figures, nil
}
