// Package api publishes the receiver's results: an in-memory Store of the
// last intervals per sender served as JSON over HTTP (/api/v1/...), and a
// JSONL writer for the results file. Both carry the same FlowRecords, with
// the JSON of the results contract (docs/results.md).
package api

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lds-net/lds/internal/results"
)

// DefaultKeep is a sensible number of intervals to keep per sender: one
// minute of 1 s intervals.
const DefaultKeep = 60

// Store keeps the last keep intervals of each sender, and at most
// maxRecords flow and link records in total: beyond that it evicts the
// oldest intervals (by start, over all senders) first. The newest interval
// stored is kept whatever its size, so the records held are at most
// max(maxRecords, the largest interval). It is safe for concurrent use.
// Add takes ownership of the Interval: the caller must not change it
// afterwards (handlers read it without copying).
type Store struct {
	keep       int
	maxRecords int
	mu         sync.RWMutex
	senders    map[string][]*results.Interval // ascending interval id
	records    int                            // flow and link records stored

	writing   atomic.Int64 // answers being written (Writing)
	writeIdle time.Duration
}

// SetWriteIdle replaces WriteIdle, the per-request write deadline, for
// this store's handlers (tests).
func (s *Store) SetWriteIdle(d time.Duration) { s.writeIdle = d }

// Writing is the number of API answers being written to their clients.
func (s *Store) Writing() int { return int(s.writing.Load()) }

// NewBoundedStore returns a Store keeping keep intervals per sender (at
// least 1) and at most maxRecords records in total (at least 1).
func NewBoundedStore(keep, maxRecords int) *Store {
	return &Store{keep: max(keep, 1), maxRecords: max(maxRecords, 1), senders: map[string][]*results.Interval{}, writeIdle: WriteIdle}
}

// Records is the number of flow and link records stored.
func (s *Store) Records() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.records
}

func records(iv *results.Interval) int { return len(iv.Flows) + len(iv.Links) + len(iv.Lost) }

// Add stores iv, replacing a stored interval of the same sender and id (a
// resend), drops the oldest beyond keep, then the oldest of all senders
// while more than maxRecords records are stored.
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
		s.records -= records(list[i])
		list[i] = iv
	case i == 0 && len(list) >= s.keep:
		return // older than everything kept
	default:
		list = slices.Insert(list, i, iv)
	}
	s.records += records(iv)
	if over := len(list) - s.keep; over > 0 {
		for _, old := range list[:over] {
			s.records -= records(old)
		}
		clear(list[:over]) // let the old intervals be collected
		list = list[over:]
	}
	s.senders[iv.Sender] = list
	s.evict()
}

// evict drops the oldest interval of all senders (by start, then sender)
// while more than maxRecords records are stored and more than one
// interval is. Call with s.mu held.
func (s *Store) evict() {
	for s.records > s.maxRecords {
		var oldest string
		found, n := false, 0
		for name, list := range s.senders {
			n += len(list)
			if len(list) == 0 {
				continue
			}
			if o := s.senders[oldest]; !found || list[0].StartNS < o[0].StartNS || (list[0].StartNS == o[0].StartNS && name < oldest) {
				oldest, found = name, true
			}
		}
		if n <= 1 {
			return
		}
		list := s.senders[oldest]
		s.records -= records(list[0])
		list[0] = nil
		if list = list[1:]; len(list) == 0 {
			delete(s.senders, oldest)
		} else {
			s.senders[oldest] = list
		}
	}
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
