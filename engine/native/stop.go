package native

import "strings"

// stopper holds back output text that could still turn into a stop string,
// so that a stop string is never emitted, not even split across events.
// Input and output are valid UTF-8; held text always starts on a character
// boundary because stop strings do.
type stopper struct {
	stops   []string
	pending string
	matched string // the stop string that ended the choice, once one has
}

// push adds text and returns what can be emitted now. stopped reports that a
// stop string matched: emit then ends just before it and the choice is over.
func (s *stopper) push(text string) (emit string, stopped bool) {
	if len(s.stops) == 0 {
		return text, false
	}
	s.pending += text
	first := -1
	for _, st := range s.stops {
		if i := strings.Index(s.pending, st); i >= 0 && (first < 0 || i < first) {
			first, s.matched = i, st
		}
	}
	if first >= 0 {
		emit = s.pending[:first]
		s.pending = ""
		return emit, true
	}
	hold := 0
	for _, st := range s.stops {
		for k := min(len(st)-1, len(s.pending)); k > hold; k-- {
			if strings.HasSuffix(s.pending, st[:k]) {
				hold = k
				break
			}
		}
	}
	emit = s.pending[:len(s.pending)-hold]
	s.pending = s.pending[len(s.pending)-hold:]
	return emit, false
}

// flush returns the held text when the choice ends for another reason.
func (s *stopper) flush() string {
	p := s.pending
	s.pending = ""
	return p
}
