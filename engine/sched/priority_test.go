package sched

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"rill/engine"
)

// prioritized adds a one-choice request over p with priority prio and fails
// the test if it is refused.
func prioritized(t *testing.T, s *Scheduler, p []int32, prio int) *Group {
	t.Helper()
	g := NewGroup(p, 0)
	g.SetPriority(prio)
	if _, err := s.Add(g); err != nil {
		t.Fatal(err)
	}
	return g
}

// index is g's position in gs, or -1.
func index(gs []*Group, g *Group) int { return slices.Index(gs, g) }

// TestPriorityAdmission: with one running slot, requests are admitted by
// priority (lower value first), then by arrival; a preempted request goes
// first among its priority.
func TestPriorityAdmission(t *testing.T) {
	t.Parallel()
	tests := []struct {
		priorities []int
		want       []int // the order of admission, as indexes of priorities
	}{
		{[]int{0, 0, 0}, []int{0, 1, 2}},
		{[]int{0, 5, -1}, []int{2, 0, 1}},
		{[]int{5, -1, 5, -1, 0}, []int{1, 3, 4, 0, 2}},
		{[]int{3, 2, 1, 0}, []int{3, 2, 1, 0}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.priorities), func(t *testing.T) {
			t.Parallel()
			s, cache := newScheduler(t, 64, Options{MaxRunning: 1})
			var gs []*Group
			for i, p := range tc.priorities {
				gs = append(gs, prioritized(t, s, prompt(10*i, 3), p))
			}
			var got []int
			for range tc.priorities {
				p := step(s, 0)
				if len(p.Seqs) != 1 {
					t.Fatalf("plan %+v: want one sequence", entries(p))
				}
				got = append(got, index(gs, p.Seqs[0].Seq.group))
				s.finish(p.Seqs[0].Seq)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("admitted %v, want %v", got, tc.want)
			}
			check(t, s, cache, gs...)
		})
	}

	t.Run("preempted first among its priority, after lower values", func(t *testing.T) {
		t.Parallel()
		s, _ := newScheduler(t, 64, Options{})
		a := prioritized(t, s, prompt(1, 3), 1)
		step(s, 0)
		b := prioritized(t, s, prompt(10, 3), 1)
		c := prioritized(t, s, prompt(20, 3), 0)
		s.leave(b.seqs[0]) // b and c wait unscheduled: make a's requeue visible
		s.leave(c.seqs[0])
		s.enqueue(b.seqs[0], false)
		s.enqueue(c.seqs[0], false)
		s.preempt(a.seqs[0])
		if want := []*Sequence{c.seqs[0], a.seqs[0], b.seqs[0]}; !slices.Equal(s.waiting, want) {
			t.Fatalf("waiting %v, want c, a, b", s.waiting)
		}
	})
}

// TestPriorityPreemption: when blocks run out for a running sequence, the
// one preempted is of the lowest priority (highest value), the newest of
// those; a waiting request that finds no blocks preempts a running one of
// a lower priority than its own, never an equal one.
func TestPriorityPreemption(t *testing.T) {
	t.Parallel()
	tests := []struct {
		priorities []int
		victim     int
	}{
		{[]int{0, 0, 0}, 2},
		{[]int{5, 0, 0}, 0},
		{[]int{0, 5, 0}, 1},
		{[]int{-1, 0, -1}, 1},
		{[]int{1, 1, 0}, 1},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint("running ", tc.priorities), func(t *testing.T) {
			t.Parallel()
			// 6 blocks of 4 tokens: three 7-token prompts take 2 each, and
			// their third decode needs a third.
			s, cache := newScheduler(t, 6, Options{})
			var gs []*Group
			for i := range tc.priorities {
				gs = append(gs, prioritized(t, s, prompt(100*i, 7), 0))
			}
			step(s, 0)
			// The running set is in admission order 0, 1, 2 with these
			// priorities, as when requests of lower values came later.
			for i, p := range tc.priorities {
				gs[i].priority = p
			}
			step(s, 0)
			p := step(s, 0)
			if len(p.Preempted) != 1 || p.Preempted[0] != gs[tc.victim].seqs[0] {
				t.Fatalf("preempted %v, want request %d's sequence", p.Preempted, tc.victim)
			}
			for _, sc := range p.Seqs {
				if sc.Seq == p.Preempted[0] {
					t.Fatal("the preempted sequence is in the plan")
				}
			}
			check(t, s, cache, gs...)
		})
	}

	admission := []struct {
		running [2]int // priorities of two running requests
		arrives int    // priority of the request that finds no blocks
		victim  int    // index of the preempted running request; -1: none
	}{
		{[2]int{5, 0}, -1, 0},
		{[2]int{5, 0}, 0, 0},
		{[2]int{0, 5}, 0, 1},
		{[2]int{5, 0}, 5, -1},
		{[2]int{0, 0}, 0, -1},
		{[2]int{0, 0}, 3, -1},
	}
	for _, tc := range admission {
		t.Run(fmt.Sprint("admission: running ", tc.running, " arrives ", tc.arrives), func(t *testing.T) {
			t.Parallel()
			// 4 blocks: two 5-token prompts take 2 each and decode within them.
			s, cache := newScheduler(t, 4, Options{})
			gs := []*Group{
				prioritized(t, s, prompt(1, 5), 0),
				prioritized(t, s, prompt(100, 5), 0),
			}
			step(s, 0)
			gs[0].priority, gs[1].priority = tc.running[0], tc.running[1] // as in the table above
			c := prioritized(t, s, prompt(200, 5), tc.arrives)
			p := step(s, 0)
			planned := slices.ContainsFunc(p.Seqs, func(sc Scheduled) bool { return sc.Seq == c.seqs[0] })
			if tc.victim < 0 {
				if len(p.Preempted) != 0 || planned {
					t.Fatalf("preempted %v, arrival planned %v: want it to wait", p.Preempted, planned)
				}
			} else {
				v := gs[tc.victim].seqs[0]
				if len(p.Preempted) != 1 || p.Preempted[0] != v || !planned || !v.Waiting() {
					t.Fatalf("preempted %v, arrival planned %v: want request %d preempted for it", p.Preempted, planned, tc.victim)
				}
				if slices.ContainsFunc(p.Seqs, func(sc Scheduled) bool { return sc.Seq == v }) {
					t.Fatal("the preempted sequence is still in the plan")
				}
			}
			check(t, s, cache, append(gs, c)...)
		})
	}
}

// TestPriorityShedding: with the queue full, a newcomer served before the
// queued request that is served last takes its place; that one is shed
// (returned, ended, holding nothing). A newcomer of the same or a lower
// priority is refused.
func TestPriorityShedding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		queued  []int // priorities of the queued requests (MaxQueued of them)
		arrives int
		shed    int // index of the queued request shed; -1: the newcomer is refused
	}{
		{[]int{0, 3}, 1, 1},
		{[]int{0, 3}, -1, 1},
		{[]int{3, 0}, 1, 0},
		{[]int{3, 3}, 0, 1},
		{[]int{0, 3}, 3, -1},
		{[]int{0, 3}, 5, -1},
		{[]int{0, 0}, 0, -1},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint("queued ", tc.queued, " arrives ", tc.arrives), func(t *testing.T) {
			t.Parallel()
			s, cache := newScheduler(t, 64, Options{MaxRunning: 1, MaxQueued: len(tc.queued)})
			running := prioritized(t, s, prompt(1, 3), 0)
			step(s, 0)
			var queued []*Group
			for i, p := range tc.queued {
				queued = append(queued, prioritized(t, s, prompt(100*(i+1), 3), p))
			}
			g := NewGroup(prompt(1000, 3), 0)
			g.SetPriority(tc.arrives)
			shed, err := s.Add(g)
			if tc.shed < 0 {
				if !errors.Is(err, engine.ErrOverloaded) || shed != nil {
					t.Fatalf("Add = %v, %v: want ErrOverloaded", shed, err)
				}
				if st := s.Stats(); st.Queued != len(tc.queued) {
					t.Fatalf("stats %+v after a refusal", st)
				}
				return
			}
			if err != nil || shed != queued[tc.shed] {
				t.Fatalf("Add = shed %d, %v: want request %d shed", index(queued, shed), err, tc.shed)
			}
			if !shed.seqs[0].Done() || slices.Contains(s.waiting, shed.seqs[0]) {
				t.Fatal("the shed request is still queued")
			}
			if st := s.Stats(); st.Queued != len(tc.queued) {
				t.Fatalf("stats %+v: want the queue full again", st)
			}
			// The newcomer is admitted in its turn: by priority, and the
			// shed one never.
			s.finish(running.seqs[0])
			var order []*Group
			for range tc.queued {
				p := step(s, 0)
				order = append(order, p.Seqs[0].Seq.group)
				s.finish(p.Seqs[0].Seq)
			}
			if slices.Contains(order, shed) || !slices.Contains(order, g) {
				t.Fatalf("admitted %v after shedding", order)
			}
			check(t, s, cache, append(queued, running, g)...)
		})
	}
}
