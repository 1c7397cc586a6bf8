package service

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"rill/internal/wheel"
	"rill/store"
)

// Event logs: the events of a stream that must outlive its connection (a
// background response, a resumable stream), kept so that a client may
// follow the stream from any point, now or after it reconnected.
//
// One goroutine, the producer, appends a stream's events as it makes them.
// The log keeps them all in memory while the stream lives, for the
// followers in this process, and writes them to the Store in batches: an
// event waits at most flushDelay, or until flushBatch events wait, before
// its batch is written. A kill -9 loses what was not written yet: at most
// the last flushDelay (50 ms) of events, or flushBatch (64) events if they
// came faster, and the batch being written. Once the stream ended and its
// last batch is written, the log leaves memory: followers read the store
// from then on, as do those in other processes (which poll it).

const (
	flushDelay = 50 * time.Millisecond
	flushBatch = 64
	// heartbeat: a live stream's Updated moves at least this often, so that
	// a follower polling the store can tell a stream whose process died
	// (staleAfter without a move) from one that is only slow.
	heartbeat  = 10 * time.Second
	staleAfter = 3 * heartbeat
	// pollInterval is how often a follower of another process's stream
	// asks the store for new events.
	pollInterval = 100 * time.Millisecond
	// storeWait bounds each of a log's own calls to the store.
	storeWait = 5 * time.Second
	// cancelPoll is how often a live log that may be cancelled from
	// another process looks for the request (cancelKey) in the store.
	cancelPoll = time.Second
)

// cancelKey is the id of the store stream by which another process asks
// for stream id to be cancelled: a record of its own, which the running
// process never writes over.
func cancelKey(id string) string { return id + "#cancel" }

// Stream statuses in the store, the Responses API's words: a stream is
// live while queued or in progress; any other status is final.
const (
	statusQueued    = "queued"
	statusCancelled = "cancelled"
)

// isFinal reports whether a stream with status has ended.
func isFinal(status string) bool { return status != statusQueued && status != statusInProgress }

// errStreamLost ends a follower of a stream whose producer stopped writing
// without ending it (its process died).
var errStreamLost = errors.New("stream lost: its producer stopped without ending it")

// eventLogs are the live logs of this process, by stream id. Safe for
// concurrent use.
type eventLogs struct {
	st  store.Store
	log *slog.Logger
	// beats ticks every live log's heartbeat, on one timer.
	beats *wheel.Wheel

	mu   sync.Mutex
	live map[string]*eventLog
}

func newEventLogs(st store.Store, log *slog.Logger) *eventLogs {
	return &eventLogs{st: st, log: log, live: make(map[string]*eventLog), beats: wheel.New(heartbeat, 10)}
}

// eventLog is one live stream's log. The producer calls append, update and
// end; followers call follow. Its writes to the store run on a goroutine
// of their own only while there is something to write (write), started by
// a batch's delay, a full batch, the end, or the heartbeat: a stream that
// waits for its engine holds no goroutine for its log. The log leaves
// once end was called and everything is written (or given up on).
type eventLog struct {
	ls *eventLogs
	id string

	mu      sync.Mutex
	events  []store.Event // every event so far; never changed once appended
	flushed int           // events[:flushed] are in the store
	status  string
	data    []byte
	dirty   bool // status or data changed since the last write
	ended   bool // end was called
	// wakes counts the log's moves (an event, its end): a follower that
	// saw wakes at n waits for it to pass n, on wake (made by the first
	// to wait on a channel, closed and forgotten at the next move) or
	// parked (hook), called back at the next move.
	wakes uint64
	wake  chan struct{}
	hooks []*waitHook
	// waiting counts those waiting on wake: the last to give up without
	// it closing drops it (doneWaitingLocked).
	waiting int
	// followers counts those following now; when it drops to zero while
	// the stream lives, abandon runs after grace, unless one comes back.
	followers int
	grace     time.Duration
	abandon   func()
	timer     *time.Timer
	// onCancel, when set, runs (once) when another process asked for the
	// stream's cancel (cancelKey).
	onCancel func()

	// The writer, under mu: writing while a write goroutine runs, again
	// when it must write once more before it stops; delay gathers a batch
	// (armed: delaying); beat moves Updated every heartbeat; watch looks
	// for a cancel request every cancelPoll (whenCancelled arms it).
	writing, again, delaying bool
	gone                     bool // written to the end: leaving or left
	failures                 int
	delay, watch             *time.Timer
	beat                     wheel.Entry // on ls.beats
	// written is closed when the log is written and left memory
	// (outOfMemory), made by the first wait: a stream that waits holds
	// no channel for it.
	written     chan struct{}
	outOfMemory bool
}

// open creates stream id in the store with status and data, and its live
// log here. The caller must end the log.
func (ls *eventLogs) open(ctx context.Context, id, status string, data []byte) (*eventLog, error) {
	if err := ls.st.PutStream(ctx, store.Stream{ID: id, Status: status, Data: data}); err != nil {
		return nil, err
	}
	l := &eventLog{ls: ls, id: id, status: status, data: data}
	ls.mu.Lock()
	ls.live[id] = l
	ls.mu.Unlock()
	l.mu.Lock()
	l.beat.F = l.beaten
	ls.beats.Add(&l.beat)
	l.mu.Unlock()
	return l, nil
}

// lookup returns the live log of stream id in this process, or nil.
func (ls *eventLogs) lookup(id string) *eventLog {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.live[id]
}

// whenCancelled runs cancel once another process asks for the stream's
// cancel through the store (requestCancel), checked every cancelPoll.
func (l *eventLog) whenCancelled(cancel func()) {
	l.mu.Lock()
	l.onCancel = cancel
	if l.watch == nil && !l.gone {
		l.watch = time.AfterFunc(cancelPoll, l.watched)
	}
	l.mu.Unlock()
}

// watched is the cancel watch's timer: it looks, and looks again later.
func (l *eventLog) watched() {
	l.checkCancel()
	l.mu.Lock()
	if !l.gone {
		l.watch.Reset(cancelPoll)
	}
	l.mu.Unlock()
}

// beaten is the heartbeat's timer: the stream's Updated moves with a
// write, even when nothing else changed.
func (l *eventLog) beaten() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return
	}
	l.dirty = true
	l.startWriteLocked()
	l.ls.beats.Add(&l.beat)
}

// requestCancel asks the process that runs stream id to cancel it.
func (ls *eventLogs) requestCancel(ctx context.Context, id string) error {
	return ls.st.PutStream(ctx, store.Stream{ID: cancelKey(id), Status: statusCancelled})
}

// checkCancel runs onCancel if another process asked for it.
func (l *eventLog) checkCancel() {
	l.mu.Lock()
	f := l.onCancel
	l.mu.Unlock()
	if f == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeWait)
	defer cancel()
	if _, err := l.ls.st.GetStream(ctx, cancelKey(l.id)); err == nil {
		l.mu.Lock()
		l.onCancel = nil
		l.mu.Unlock()
		f()
	}
}

// whenAbandoned runs abandon once nobody has followed the stream for
// grace (counted from now if nobody follows now), unless the stream ended
// first. A resumable stream's producer stops with it.
func (l *eventLog) whenAbandoned(grace time.Duration, abandon func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grace, l.abandon = grace, abandon
	if l.followers == 0 && !l.ended {
		l.timer = time.AfterFunc(grace, abandon)
	}
}

func (l *eventLog) join() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.followers++
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

func (l *eventLog) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.followers--
	if l.followers == 0 && !l.ended && l.abandon != nil {
		l.timer = time.AfterFunc(l.grace, l.abandon)
	}
}

// append adds the event seq, data to the log; seq must be above the last
// one's. data is copied.
func (l *eventLog) append(seq int64, data []byte) {
	l.mu.Lock()
	l.events = append(l.events, store.Event{Seq: seq, Data: slices.Clone(data)})
	n := len(l.events) - l.flushed
	hooks := l.wakeLocked()
	l.mu.Unlock()
	callHooks(hooks)
	if n == 1 || n >= flushBatch {
		l.signal()
	}
}

// update sets the stream's status and data (nil: the data as it was),
// written with the next batch.
func (l *eventLog) update(status string, data []byte) {
	l.mu.Lock()
	if data != nil {
		l.data = data
	}
	l.status, l.dirty = status, true
	l.mu.Unlock()
	l.signal()
}

// end ends the stream with its final status and data (nil: the data as
// it was): followers get what is left and return, and the writer writes
// the rest and leaves.
func (l *eventLog) end(status string, data []byte) {
	l.mu.Lock()
	if data != nil {
		l.data = data
	}
	l.status, l.dirty, l.ended = status, true, true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	hooks := l.wakeLocked()
	l.mu.Unlock()
	callHooks(hooks)
	l.signal()
}

// wait returns when the log's last batch is written, or ctx ends.
func (l *eventLog) wait(ctx context.Context) error {
	l.mu.Lock()
	if l.written == nil {
		l.written = make(chan struct{})
		if l.outOfMemory {
			close(l.written)
		}
	}
	written := l.written
	l.mu.Unlock()
	select {
	case <-written:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wakeLocked wakes the followers: those waiting on wake, and those parked
// (hook), whose hooks it returns for the caller to call once it let go of
// l.mu.
func (l *eventLog) wakeLocked() []*waitHook {
	l.wakes++
	if l.wake != nil {
		close(l.wake)
		l.wake, l.waiting = nil, 0
	}
	hooks := l.hooks
	l.hooks = nil
	return hooks
}

// waitChanLocked returns a channel that is closed once the log moved past
// seen (its wakes then): closed already when it has. The caller must hand
// it back (doneWaitingLocked) when it stops waiting. l.mu is held.
func (l *eventLog) waitChanLocked(seen uint64) <-chan struct{} {
	if l.wakes != seen {
		return closedChan
	}
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	l.waiting++
	return l.wake
}

// doneWaitingLocked hands back a channel of waitChanLocked: the last
// waiter to stop waiting on one that did not close drops it, so that a
// log whose followers wait parked (hook) keeps none. l.mu is held.
func (l *eventLog) doneWaitingLocked(ch <-chan struct{}) {
	if l.wake == nil || ch != l.wake {
		return // closed, or the closed one
	}
	if l.waiting--; l.waiting == 0 {
		l.wake = nil
	}
}

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// callHooks runs the functions wakeLocked returned.
func callHooks(hooks []*waitHook) {
	for _, h := range hooks {
		h.f()
	}
}

// hook has h.f called once, when the log next moves past seen (an event,
// its end): a parked follower's wait, with no goroutine. It reports false,
// hooking nothing, when the log has moved past seen already. h.f runs on
// the producer's goroutine: it must not block.
func (l *eventLog) hook(seen uint64, h *waitHook) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wakes != seen {
		return false
	}
	l.hooks = append(l.hooks, h)
	return true
}

// unhook keeps h.f from being called, and reports whether it was waiting.
func (l *eventLog) unhook(h *waitHook) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.hooks, h)
	if i < 0 {
		return false
	}
	l.hooks = slices.Delete(l.hooks, i, i+1)
	return true
}

// onWake is hook for a function: it calls f at once when the log moved
// past seen already; stop keeps f from running and reports whether it
// did.
func (l *eventLog) onWake(seen uint64, f func()) (stop func() bool) {
	h := &waitHook{f: f}
	if !l.hook(seen, h) {
		f()
		return func() bool { return false }
	}
	return func() bool { return l.unhook(h) }
}

// signal tells the writer there is something to write: at once when the
// batch is full or the log ended, else after flushDelay, which gathers
// what comes meanwhile.
func (l *eventLog) signal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || len(l.events)-l.flushed >= flushBatch || l.writing {
		l.startWriteLocked() // a running write writes again before it stops
		return
	}
	if l.delaying {
		return
	}
	l.delaying = true
	if l.delay == nil {
		l.delay = time.AfterFunc(flushDelay, l.delayed)
	} else {
		l.delay.Reset(flushDelay)
	}
}

// delayed is the delay timer's: the batch gathered long enough.
func (l *eventLog) delayed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.delaying {
		l.startWriteLocked()
	}
	l.delay = nil // a stream that waits keeps no timer; the next batch makes one
}

// startWriteLocked starts a write goroutine, or has the running one write
// once more; l.mu is held.
func (l *eventLog) startWriteLocked() {
	if l.delaying {
		l.delaying = false
		l.delay.Stop()
	}
	if l.writing {
		l.again = true
		return
	}
	l.writing = true
	go l.write()
}

// write writes the log to the store, again while more came meanwhile,
// then ends, or leaves the log once it ended and everything is written.
// Its store calls are bounded by storeWait each; a failed write is retried
// with the next batch (or heartbeat), and given up on (logged) a few tries
// after the stream ended.
func (l *eventLog) write() {
	for {
		done, err := l.flush()
		l.mu.Lock()
		if err != nil {
			l.failures++
			l.ls.log.Warn("event log: store write failed", slog.String("stream", l.id),
				slog.Int("failures", l.failures), slog.Any("err", err))
			if done && l.failures <= 3 {
				l.mu.Unlock()
				time.Sleep(flushDelay) // the stream ended: retry soon, a few times
				continue
			}
		}
		if done {
			l.gone = true
			l.ls.beats.Remove(&l.beat)
			if l.watch != nil {
				l.watch.Stop()
			}
			l.mu.Unlock()
			l.leaveMemory()
			return
		}
		// Events that came during the write signalled nobody (append
		// signals the first of a batch): they are the next batch.
		if !l.again && (err != nil || len(l.events) == l.flushed) {
			l.writing = false
			l.mu.Unlock()
			return
		}
		l.again = false
		l.mu.Unlock()
	}
}

// leaveMemory takes the written log out of memory: followers read the
// store.
func (l *eventLog) leaveMemory() {
	l.ls.mu.Lock()
	if l.ls.live[l.id] == l {
		delete(l.ls.live, l.id)
	}
	l.ls.mu.Unlock()
	// A cancel request that came too late has nothing left to stop.
	ctx, cancel := context.WithTimeout(context.Background(), storeWait)
	_ = l.ls.st.DeleteStream(ctx, cancelKey(l.id))
	cancel()
	l.mu.Lock()
	l.outOfMemory = true
	if l.written != nil {
		close(l.written)
	}
	l.mu.Unlock()
}

// flush writes the events and state not yet written; done reports that the
// log ended and nothing is left (or, after failures, that it ended).
func (l *eventLog) flush() (done bool, err error) {
	l.mu.Lock()
	batch := l.events[l.flushed:]
	status, data, dirty, ended := l.status, l.data, l.dirty, l.ended
	l.dirty = false
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), storeWait)
	defer cancel()
	if len(batch) > 0 {
		if err := l.ls.st.AppendEvents(ctx, l.id, batch); err != nil {
			l.mu.Lock()
			l.dirty = l.dirty || dirty
			l.mu.Unlock()
			return ended, err
		}
		l.mu.Lock()
		l.flushed += len(batch)
		l.mu.Unlock()
	}
	if dirty {
		// After the events: a follower that sees a final status has the
		// stream's every event in the store.
		if err := l.ls.st.PutStream(ctx, store.Stream{ID: l.id, Status: status, Data: data}); err != nil {
			l.mu.Lock()
			l.dirty = true
			l.mu.Unlock()
			return ended, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended && l.flushed == len(l.events) && !l.dirty, nil
}

// follow calls send with each event of stream id whose Seq is above after,
// in order, with no gap and none twice, until the stream ended; it returns
// the stream's final status and data. A stream live in this process is
// followed in memory; another's is polled in the store. When nothing was
// sent for a ping interval, ping is called (if ping > 0 and idle is not
// nil). It returns early with ctx's error, send's, idle's, the store's
// (store.ErrNotFound: no such stream), or errStreamLost.
func (ls *eventLogs) follow(ctx context.Context, id string, after int64, ping time.Duration,
	send func(store.Event) error, idle func() error) (string, []byte, error) {
	var tick <-chan time.Time
	if ping > 0 && idle != nil {
		t := time.NewTicker(ping)
		defer t.Stop()
		tick = t.C
	}
	if l := ls.lookup(id); l != nil {
		return l.follow(ctx, after, tick, send, idle)
	}
	return ls.poll(ctx, id, after, tick, send, idle)
}

func (l *eventLog) follow(ctx context.Context, after int64, tick <-chan time.Time,
	send func(store.Event) error, idle func() error) (string, []byte, error) {
	l.join()
	defer l.leave()
	sent := false
	for {
		l.mu.Lock()
		i, _ := slices.BinarySearchFunc(l.events, after+1, cmpSeq)
		evs := l.events[i:len(l.events):len(l.events)]
		ended, status, data, seen := l.ended, l.status, l.data, l.wakes
		l.mu.Unlock()
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return "", nil, err
			}
			after, sent = ev.Seq, true
		}
		if len(evs) > 0 {
			continue
		}
		if ended {
			return status, data, nil
		}
		l.mu.Lock()
		wake := l.waitChanLocked(seen)
		l.mu.Unlock()
		var err error
		select {
		case <-wake:
		case <-ctx.Done():
			err = ctx.Err()
		case <-tick:
			if !sent {
				err = idle()
			}
			sent = false
		}
		l.mu.Lock()
		l.doneWaitingLocked(wake)
		l.mu.Unlock()
		if err != nil {
			return "", nil, err
		}
	}
}

// poll follows stream id in the store.
func (ls *eventLogs) poll(ctx context.Context, id string, after int64, tick <-chan time.Time,
	send func(store.Event) error, idle func() error) (string, []byte, error) {
	const page = 256
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	sent := false
	final := false // the last look at the stream found it ended
	for {
		evs, err := ls.st.Events(ctx, id, after, page)
		if err != nil {
			return "", nil, err
		}
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return "", nil, err
			}
			after, sent = ev.Seq, true
		}
		if len(evs) == page {
			continue
		}
		if final {
			// The stream had ended before this read: it saw every event.
			s, err := ls.st.GetStream(ctx, id)
			return s.Status, s.Data, err
		}
		s, err := ls.st.GetStream(ctx, id)
		if err != nil {
			return "", nil, err
		}
		if isFinal(s.Status) {
			final = true // one more read: events written before the status
			continue
		}
		if time.Since(s.Updated) > staleAfter {
			return "", nil, errStreamLost
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return "", nil, ctx.Err()
		case <-tick:
			if !sent {
				if err := idle(); err != nil {
					return "", nil, err
				}
			}
			sent = false
		}
	}
}

func cmpSeq(e store.Event, seq int64) int {
	switch {
	case e.Seq < seq:
		return -1
	case e.Seq > seq:
		return 1
	}
	return 0
}
