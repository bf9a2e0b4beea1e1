// Package api publishes the receiver's results: an in-memory Store of the
// last intervals per sender served as JSON over HTTP (/api/v1/...), and a
// JSONL writer for the results file. Both carry the same FlowRecords, with
// the JSON of the results contract (DESIGN.md §6).
package api

import (
	"slices"
	"sort"
	"sync"

	"github.com/lds-net/lds/internal/results"
)

// DefaultKeep is a sensible number of intervals to keep per sender: one
// minute of 1 s intervals. Memory grows with keep × flows per interval
// (about 300 bytes per flow record).
const DefaultKeep = 60

// Store keeps the last keep intervals of each sender. It is safe for
// concurrent use. Add takes ownership of the Interval: the caller must not
// change it afterwards (handlers read it without copying).
type Store struct {
	keep    int
	mu      sync.RWMutex
	senders map[string][]*results.Interval // ascending interval id
}

// NewStore returns a Store keeping keep intervals per sender (at least 1).
func NewStore(keep int) *Store {
	return &Store{keep: max(keep, 1), senders: map[string][]*results.Interval{}}
}

// Add stores iv, replacing a stored interval of the same sender and id (a
// resend), and drops the oldest beyond keep.
func (s *Store) Add(iv *results.Interval) {
	if iv == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.senders[iv.Sender]
	i := sort.Search(len(list), func(i int) bool { return list[i].Interval >= iv.Interval })
	switch {
	case i < len(list) && list[i].Interval == iv.Interval:
		list[i] = iv
	case i == 0 && len(list) >= s.keep:
		return // older than everything kept
	default:
		list = slices.Insert(list, i, iv)
	}
	if over := len(list) - s.keep; over > 0 {
		clear(list[:over]) // let the old intervals be collected
		list = list[over:]
	}
	s.senders[iv.Sender] = list
}

// snapshot returns the stored intervals of sender ("" = all senders), each
// list ascending; the lists are copies, the Intervals shared (immutable).
func (s *Store) snapshot(sender string) map[string][]*results.Interval {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string][]*results.Interval, len(s.senders))
	for name, list := range s.senders {
		if sender == "" || name == sender {
			out[name] = slices.Clone(list)
		}
	}
	return out
}

// hasRecords says whether an interval carries results (not voided).
func hasRecords(iv *results.Interval) bool { return len(iv.Flows) > 0 || len(iv.Links) > 0 }
