package native

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"rill/engine/kvcache"
	"rill/engine/model"
	"rill/engine/promptcache"
)

// BlockTransfer is a Runner whose KV blocks can be copied out and in as
// bytes: what the prompt cache's disk tier (Options.PromptCache) needs. A
// runner that does not implement it, or whose BlockLayout is "", serves
// without the tier.
type BlockTransfer interface {
	// BlockLayout names the byte layout of a block (element type, shape,
	// byte order): blocks of equal layouts are interchangeable.
	BlockLayout() string
	// BlockBytes is the size of one block's bytes.
	BlockBytes() int
	// ReadBlock copies block id's keys and values of every layer into
	// dst (BlockBytes long).
	ReadBlock(dst []byte, id int)
	// WriteBlock copies src, bytes ReadBlock wrote under the same
	// layout, into block id.
	WriteBlock(id int, src []byte)
}

// Defaults of the disk tier.
const (
	// DefaultPromptCacheSaveTime bounds how long Close spends saving the
	// cache to the disk tier.
	DefaultPromptCacheSaveTime = 30 * time.Second
	// diskQueueBytes bounds the memory of blocks waiting to be written.
	diskQueueBytes = 64 << 20
)

// diskTier is an engine's side of the prompt cache's disk tier: blocks the
// KV cache indexes (computed) and blocks it evicts are copied out on the
// loop and written behind it by a writer goroutine, through a bounded
// queue; a block that finds the queue full is not saved then (if it was
// just computed, its eviction tries again). A sequence whose prefix
// misses memory loads what the disk holds of it before it is matched (see
// load); Close saves every cached block the disk lacks (see close). So a
// crash loses the blocks queued and those that found the queue full; a
// Close loses nothing unless its time runs out. The writer is the
// engine's: it starts in New and ends in Close.
type diskTier struct {
	scope  *promptcache.Scope
	runner BlockTransfer
	log    *slog.Logger
	model  string

	jobs chan diskJob
	bufs chan []byte // block buffers not in a job; a nil one is allocated on first use
	stop atomic.Bool // the writer drops what is queued
	done chan struct{}
	// writeThrough saves blocks as they are computed, not only when they
	// are evicted (tests turn it off to see evictions saved).
	writeThrough bool

	// Owned by the loop (and by Close once the loop has ended).
	readBuf []byte
	next    promptcache.Block // the block fetched for Load's put

	// Counters, in blocks: loaded from disk, refused there (bad files),
	// queued for writing, written, not written (queue full, or a write
	// failed).
	loaded, refused, queued, saved, dropped, failed atomic.Int64
}

type diskJob struct {
	hash  uint64
	block promptcache.Block
}

// newDiskTier returns the disk tier of m's runner r in dir, or nil (and
// logs why) when the engine cannot have one.
func newDiskTier(dir *promptcache.Dir, m *model.Model, r Runner, o *Options, split bool) *diskTier {
	bt, ok := r.(BlockTransfer)
	switch {
	case split:
		// A prefix hit needs the sliding layers' window too, which the
		// blocks of the full layers alone cannot restore: only a
		// recomputation from the start could. Saving both pools' blocks
		// is not done yet.
		o.Logger.Warn("prompt cache directory ignored: not supported with the sliding layers' window pool (see FullSlidingKV)", slog.String("model", o.ID))
		return nil
	case !ok || bt.BlockLayout() == "":
		o.Logger.Warn("prompt cache directory ignored: the compute backend cannot copy KV blocks", slog.String("model", o.ID))
		return nil
	case o.Draft != nil:
		// A block holds the draft model's keys and values too; saving
		// both is not done yet.
		o.Logger.Warn("prompt cache directory ignored: not supported with a draft model", slog.String("model", o.ID))
		return nil
	}
	n := max(1, diskQueueBytes/bt.BlockBytes())
	d := &diskTier{
		scope:  dir.Scope(fmt.Sprintf("model=%s kv=%s", m.Fingerprint(), bt.BlockLayout())),
		runner: bt,
		log:    o.Logger,
		model:  o.ID,
		jobs:   make(chan diskJob, n),
		bufs:   make(chan []byte, n),
		done:   make(chan struct{}),

		writeThrough: true,
	}
	for range n {
		d.bufs <- nil
	}
	go d.write()
	return d
}

// write is the writer goroutine: it writes queued blocks until the queue
// is closed, and only drains it once stop is set.
func (d *diskTier) write() {
	defer close(d.done)
	for j := range d.jobs {
		if !d.stop.Load() {
			if err := d.scope.Put(j.hash, j.block); err != nil {
				if d.failed.Add(1) == 1 {
					d.log.Warn("prompt cache: writing a block failed", slog.String("model", d.model), slog.Any("err", err))
				}
			} else {
				d.saved.Add(1)
			}
		}
		d.bufs <- j.block.Data
	}
}

// save copies block id, just computed or about to be evicted from memory,
// into the write queue, unless the disk has it already or the queue is
// full. It runs on the loop, inside the KV cache's commit or eviction
// (kvcache.Options.Indexed, Evict).
func (d *diskTier) save(id int32, l kvcache.Link) {
	if d.scope.Has(l.Hash) {
		return
	}
	select {
	case buf := <-d.bufs:
		d.enqueue(buf, id, l)
	default:
		d.dropped.Add(1)
	}
}

// enqueue copies block id into buf and queues it; the queue has room for
// every buffer.
func (d *diskTier) enqueue(buf []byte, id int32, l kvcache.Link) {
	if buf == nil {
		buf = make([]byte, d.runner.BlockBytes())
	}
	d.runner.ReadBlock(buf, int(id))
	d.queued.Add(1)
	d.jobs <- diskJob{hash: l.Hash, block: promptcache.Block{Parent: l.Parent, Tokens: slices.Clone(l.Tokens), Data: buf}}
}

// loadFromDisk is the scheduler's Load: it extends the in-memory prefix of
// a sequence's tokens with the blocks the disk tier holds of them, so that
// the match that follows counts them as cached. Without a tier it does
// nothing.
func (e *Engine) loadFromDisk(tokens []int32) {
	if e.disk != nil {
		e.disk.load(e.cache, tokens)
	}
}

// load extends the in-memory prefix of prompt with the blocks the disk
// holds of it (see kvcache.Manager.Load). A block that cannot be read, or
// that is not the one the prompt needs, ends the load: the rest is
// computed. It runs on the loop.
func (d *diskTier) load(cache *kvcache.Manager, prompt []int32) {
	n := cache.Load(prompt, d.fetch, func(id int32) { d.runner.WriteBlock(int(id), d.next.Data) })
	if n > 0 {
		d.loaded.Add(int64(n))
		d.log.Debug("prompt cache: blocks loaded from disk", slog.String("model", d.model), slog.Int("blocks", n))
	}
}

// fetch reads the block of l into d.next and reports whether it is l's.
func (d *diskTier) fetch(l kvcache.Link) bool {
	if !d.scope.Has(l.Hash) {
		return false
	}
	b, buf, err := d.scope.Get(l.Hash, d.readBuf)
	d.readBuf = buf
	if err == nil && (b.Parent != l.Parent || !slices.Equal(b.Tokens, l.Tokens) || len(b.Data) != d.runner.BlockBytes()) {
		// The same chain hash for another prefix, or a block of another
		// size under the same layout name: never use it.
		err = errors.New("the block on disk is not the prompt's")
	}
	if err != nil {
		if !errors.Is(err, promptcache.ErrMiss) {
			d.refused.Add(1)
			d.log.Warn("prompt cache: block refused; computing it", slog.String("model", d.model), slog.Any("err", err))
		}
		return false
	}
	d.next = b
	return true
}

// close saves every block cached in memory that the disk lacks, then
// stops the writer, within limit: past it the blocks not yet written are
// dropped (after the block being written). The loop must have ended.
func (d *diskTier) close(cache *kvcache.Manager, limit time.Duration) {
	start := time.Now()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	queued := 0
save:
	for id, l := range cache.Cached() {
		if d.scope.Has(l.Hash) {
			continue
		}
		select {
		case buf := <-d.bufs:
			d.enqueue(buf, id, l)
			queued++
		case <-deadline.C:
			d.stop.Store(true)
			break save
		}
	}
	close(d.jobs)
	select {
	case <-d.done:
	case <-deadline.C:
		d.stop.Store(true)
		<-d.done
	}
	d.log.Info("prompt cache saved", slog.String("model", d.model), slog.Int("queued", queued),
		slog.Int64("saved", d.saved.Load()), slog.Int64("dropped", d.dropped.Load()),
		slog.Bool("cut_short", d.stop.Load()), slog.Duration("took", time.Since(start)))
}
