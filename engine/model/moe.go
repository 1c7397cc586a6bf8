package model

import (
	"fmt"

	"rill/engine/gguf"
	"rill/engine/quant"
	"rill/engine/tensor"
)

// A mixture-of-experts feed-forward replaces a layer's one gated
// feed-forward by Experts of them: a router scores every expert for each
// token, the token goes to the ExpertsUsed best, and their outputs are
// mixed by the router's weights (llama.cpp's build_moe_ffn). Architectures
// differ in how the router weighs (tensor.Routing), in the activation of
// the experts, and in extras such as Qwen2-MoE's shared expert; the
// forward pass below reads them from the layer, so another architecture
// adds a description rather than a code path.

// moeArch is what an architecture says about its experts.
type moeArch struct {
	gating tensor.Gating
	// norm: the chosen weights are divided by their sum.
	norm bool
	act  activation
	// shared: every layer also has a shared expert, always used, whose
	// output is scaled by the sigmoid of its own gate logit
	// (ffn_gate_inp_shexp) before it joins the mix (Qwen2-MoE).
	shared bool
}

// activation is the gated activation of a feed-forward:
// dst = act(gate) * up.
type activation int

const (
	actSwiGLU    activation = iota // SiLU
	actGeGLU                       // GELU, tanh approximation
	actSwiGLUOAI                   // gpt-oss's clamped SwiGLU (Backend.SwiGLUOAI)
)

// gpt-oss's activation constants, as llama.cpp's build_moe_ffn fixes
// them (GGUF files carry neither).
const (
	oaiAlpha = 1.702
	oaiLimit = 7
)

// experts is the mixture-of-experts feed-forward of one layer. Each
// expert's weights are 2-D slices of the file's 3-D tensors (whole rows,
// so any weight type is a valid tensor.Matrix); biases, where the file has
// them, are per expert too.
type experts struct {
	router         linear   // Experts rows of Embd: the router's logits
	gate, up, down []linear // per expert: ExpertFF rows of Embd, and Embd rows of ExpertFF
	route          tensor.Routing
	act            activation

	// The shared expert (nil weights when the architecture has none):
	// SharedFF rows, and its gate logit's weights (1 row of Embd).
	shGate, shUp, shDown, shGateInp linear
}

// loadExperts reads the mixture of experts of layer prefix p.
func (m *Model) loadExperts(p string, a *moeArch) (*experts, error) {
	c, f := &m.Config, m.File
	n, E, F := c.Experts, c.Embd, c.ExpertFF
	x := &experts{act: a.act, route: tensor.Routing{Experts: n, Used: c.ExpertsUsed, Gating: a.gating, Norm: a.norm}}
	var err error
	if x.router, err = linearLayer(f, p+"ffn_gate_inp", n, E); err != nil {
		return nil, err
	}
	for _, t := range []struct {
		dst        *[]linear
		name       string
		rows, cols int
	}{{&x.gate, "ffn_gate_exps", F, E}, {&x.up, "ffn_up_exps", F, E}, {&x.down, "ffn_down_exps", E, F}} {
		if *t.dst, err = expertLayers(f, p+t.name, n, t.rows, t.cols); err != nil {
			return nil, err
		}
		if m.routed == nil {
			m.routed = map[string]bool{}
		}
		m.routed[p+t.name+".weight"] = true
		if (*t.dst)[0].bias != nil {
			m.routed[p+t.name+".bias"] = true
		}
	}
	if !a.shared {
		return x, nil
	}
	S := c.SharedFF
	for _, t := range []struct {
		dst        *linear
		name       string
		rows, cols int
	}{{&x.shGate, "ffn_gate_shexp", S, E}, {&x.shUp, "ffn_up_shexp", S, E}, {&x.shDown, "ffn_down_shexp", E, S}} {
		if *t.dst, err = linearLayer(f, p+t.name, t.rows, t.cols); err != nil {
			return nil, err
		}
	}
	// The shared expert's gate is one row of weights, stored as a vector.
	name := p + "ffn_gate_inp_shexp.weight"
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s is missing", name)
	}
	if !(len(t.Shape) == 1 && t.Shape[0] == E || len(t.Shape) == 2 && t.Shape[0] == E && t.Shape[1] == 1) {
		return nil, fmt.Errorf("tensor %s has shape %v, want [%d]", name, t.Shape, E)
	}
	if x.shGateInp.w, err = weightMatrix(name, t, 1, E); err != nil {
		return nil, err
	}
	return x, nil
}

// expertLayers returns the n linear layers of name: name.weight, a 3-D
// tensor of GGML shape [cols, rows, n] whose expert e is rows x cols, and
// name.bias ([rows, n]) when the file has it.
func expertLayers(f *gguf.File, name string, n, rows, cols int) ([]linear, error) {
	wname := name + ".weight"
	t, ok := f.Tensor(wname)
	if !ok {
		return nil, fmt.Errorf("tensor %s is missing", wname)
	}
	if len(t.Shape) != 3 || t.Shape[0] != cols || t.Shape[1] != rows || t.Shape[2] != n {
		return nil, fmt.Errorf("tensor %s has shape %v, want [%d %d %d]", wname, t.Shape, cols, rows, n)
	}
	all, err := weightMatrix(wname, t, n*rows, cols)
	if err != nil {
		return nil, err
	}
	ls := make([]linear, n)
	for e := range ls {
		ls[e].w = all.SliceRows(e*rows, (e+1)*rows)
	}
	bname := name + ".bias"
	bt, ok := f.Tensor(bname)
	if !ok {
		return ls, nil
	}
	if len(bt.Shape) != 2 || bt.Shape[0] != rows || bt.Shape[1] != n {
		return nil, fmt.Errorf("tensor %s has shape %v, want [%d %d]", bname, bt.Shape, rows, n)
	}
	bias := make([]float32, n*rows)
	if err := quant.Dequantize(bt.Type, bias, bt.Data); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", bname, err)
	}
	for e := range ls {
		ls[e].bias = bias[e*rows : (e+1)*rows : (e+1)*rows]
	}
	return ls, nil
}

// moeScratch is a Runner's memory for mixture-of-experts layers, sized for
// its largest batch of T tokens: the router's logits (T rows of Experts),
// the chosen experts and weights (T rows of Used), the token rows grouped
// by expert (T*Used rows of Embd), their hidden states (T*Used rows of
// ExpertFF, or T of SharedFF), and every expert output, the shared
// expert's last (T*Used+T rows of Embd).
type moeScratch struct {
	logits, weights []float32
	ids             []int32
	start, next     []int32 // per expert: the first of its grouped rows; the next one to fill
	rows            []int32 // per token and mixed output: its row of out
	mix             []float32
	x, gate, up     []float32
	out             []float32
	shGate          []float32 // T: the shared expert's gate

	// The arguments of one LinearBatch: two per expert at most.
	bdst, bx [][]float32
	bw       []tensor.Matrix
	bt       []int
}

func newMoEScratch(c *Config, T int) moeScratch {
	k, kk := c.ExpertsUsed, c.ExpertsUsed
	if c.SharedFF > 0 {
		kk++
	}
	hid := max(T*k*c.ExpertFF, T*c.SharedFF)
	return moeScratch{
		logits: make([]float32, T*c.Experts), weights: make([]float32, T*k), ids: make([]int32, T*k),
		start: make([]int32, c.Experts+1), next: make([]int32, c.Experts),
		rows: make([]int32, T*kk), mix: make([]float32, T*kk),
		x: make([]float32, T*k*c.Embd), gate: make([]float32, hid), up: make([]float32, hid),
		out: make([]float32, T*kk*c.Embd), shGate: make([]float32, T),
		bdst: make([][]float32, 0, 2*c.Experts), bx: make([][]float32, 0, 2*c.Experts),
		bw: make([]tensor.Matrix, 0, 2*c.Experts), bt: make([]int, 0, 2*c.Experts),
	}
}

// mixture sets dst to the mixture-of-experts feed-forward of the T rows of
// xn. Rows are grouped by expert, so that each expert multiplies all of
// its tokens at once and its weights are read once per batch; a decode
// step (T = 1) reads only the experts it chose.
func (r *Runner) mixture(dst []float32, x *experts, xn []float32, T int) {
	c, be, s := &r.m.Config, r.be, &r.moe
	E, F, n, k := c.Embd, c.ExpertFF, x.route.Experts, x.route.Used
	kk := k
	if x.shGateInp.w.Data != nil {
		kk++
	}
	logits, ids, w := s.logits[:T*n], s.ids[:T*k], s.weights[:T*k]
	r.linear(logits, &x.router, xn, T)
	be.Route(ids, w, logits, x.route)

	// Group the (token, expert) pairs by expert: start[e] is expert e's
	// first row, and rows maps each pair to its row.
	start, next := s.start[:n+1], s.next[:n]
	clear(start)
	for _, e := range ids {
		start[e+1]++
	}
	for e := range n {
		start[e+1] += start[e]
	}
	copy(next, start[:n])
	rows, mix := s.rows[:T*kk], s.mix[:T*kk]
	for t := range T {
		for j := range k {
			e := ids[t*k+j]
			p := next[e]
			next[e]++
			rows[t*kk+j], mix[t*kk+j] = p, w[t*k+j]
			if T > 1 {
				copy(s.x[int(p)*E:int(p+1)*E], xn[t*E:(t+1)*E])
			}
		}
	}
	// Every chosen expert's gate and up projections in one batch, the
	// activation over all their rows at once, then every down projection
	// in another batch.
	for e := range n {
		lo, hi := int(start[e]), int(start[e+1])
		if lo == hi {
			continue
		}
		xe := xn[:E] // one token: every expert reads it
		if T > 1 {
			xe = s.x[lo*E : hi*E]
		}
		s.add(s.gate[lo*F:hi*F], x.gate[e].w, xe, hi-lo)
		s.add(s.up[lo*F:hi*F], x.up[e].w, xe, hi-lo)
	}
	s.run(be)
	r.expertBiases(x.gate, x.up, F)
	g, u := s.gate[:T*k*F], s.up[:T*k*F]
	r.activate(x.act, g, u)
	for e := range n {
		lo, hi := int(start[e]), int(start[e+1])
		if lo < hi {
			s.add(s.out[lo*E:hi*E], x.down[e].w, s.gate[lo*F:hi*F], hi-lo)
		}
	}
	s.run(be)
	r.expertBiases(x.down, nil, E)
	if kk > k {
		// The shared expert's outputs follow the routed ones, and join
		// each token's mix last, weighted by the sigmoid of its gate.
		S, base := c.SharedFF, T*k
		r.ffn(s.out[base*E:(base+T)*E], &x.shGate, &x.shUp, &x.shDown, actSwiGLU, xn, s.gate[:T*S], s.up[:T*S], T)
		g := s.shGate[:T]
		r.linear(g, &x.shGateInp, xn, T)
		be.Sigmoid(g, g)
		for t := range T {
			rows[t*kk+k], mix[t*kk+k] = int32(base+t), g[t]
		}
	}
	be.Combine(dst, s.out[:T*kk*E], rows, mix, kk)
}

// add queues dst = x·wᵀ over T rows for the next run.
func (s *moeScratch) add(dst []float32, w tensor.Matrix, x []float32, T int) {
	s.bdst, s.bw, s.bx, s.bt = append(s.bdst, dst), append(s.bw, w), append(s.bx, x), append(s.bt, T)
}

// run multiplies what add queued, in one LinearBatch.
func (s *moeScratch) run(be Backend) {
	be.LinearBatch(s.bdst, s.bw, s.bx, s.bt)
	clear(s.bdst) // keep no reference to the batch's buffers
	clear(s.bx)
	s.bdst, s.bw, s.bx, s.bt = s.bdst[:0], s.bw[:0], s.bx[:0], s.bt[:0]
}

// expertBiases adds the biases of the experts as (and bs, when not nil)
// to their grouped output rows (width values each): gate and up into
// the hidden states, or down into the outputs.
func (r *Runner) expertBiases(as, bs []linear, width int) {
	if as[0].bias == nil && (bs == nil || bs[0].bias == nil) {
		return
	}
	s := &r.moe
	dsts := [2][]float32{s.gate, s.up}
	if bs == nil {
		dsts[0] = s.out
	}
	for e := range as {
		lo, hi := int(s.start[e]), int(s.start[e+1])
		if lo == hi {
			continue
		}
		for i, ls := range [2][]linear{as, bs} {
			if ls != nil && ls[e].bias != nil {
				r.be.AddBias(dsts[i][lo*width:hi*width], ls[e].bias)
			}
		}
	}
}

// ffn sets dst = Down(act(Gate(x)) * Up(x)) for T rows of x, with gate
// and up as scratch.
func (r *Runner) ffn(dst []float32, gate, up, down *linear, act activation, x, g, u []float32, T int) {
	r.ldst[0], r.ldst[1], r.ll[0], r.ll[1] = g, u, gate, up
	r.linears(x, T, 2)
	r.activate(act, g, u)
	r.linear(dst, down, g, T)
}

// activate sets g = act(g) * u elementwise: the gated activation of a
// feed-forward's hidden states.
func (r *Runner) activate(act activation, g, u []float32) {
	switch act {
	case actGeGLU:
		r.be.GeGLU(g, g, u)
	case actSwiGLUOAI:
		r.be.SwiGLUOAI(g, g, u, oaiAlpha, oaiLimit)
	default:
		r.be.SwiGLU(g, g, u)
	}
}

// expertWeights lists the matrices of x that Linear multiplies.
func (x *experts) weights() []tensor.Matrix {
	ws := []tensor.Matrix{x.router.w}
	for e := range x.gate {
		ws = append(ws, x.gate[e].w, x.up[e].w, x.down[e].w)
	}
	for _, l := range []linear{x.shGate, x.shUp, x.shDown, x.shGateInp} {
		if l.w.Data != nil {
			ws = append(ws, l.w)
		}
	}
	return ws
}
