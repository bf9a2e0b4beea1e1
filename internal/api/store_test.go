package api

import (
	"slices"
	"testing"

	"github.com/lds-net/lds/internal/results"
)

// TestStoreMaxRecords: beyond max records the oldest intervals of all
// senders go first, the newest interval stays whatever its size, and a
// resend replaces its interval's count.
func TestStoreMaxRecords(t *testing.T) {
	s := NewBoundedStore(10, 10)
	add := func(sender string, id int64, flows int) {
		s.Add(&results.Interval{Sender: sender, Interval: id, StartNS: id * 1e9, Flows: make([]results.FlowRecord, flows)})
	}
	ids := func(sender string) []int64 {
		var out []int64
		for _, iv := range s.snapshot(sender)[sender] {
			out = append(out, iv.Interval)
		}
		return out
	}
	add("a", 1, 4)
	add("b", 1, 4)
	add("a", 2, 2)
	if s.Records() != 10 || !slices.Equal(ids("a"), []int64{1, 2}) || !slices.Equal(ids("b"), []int64{1}) {
		t.Fatalf("at the cap: %d records, a %v, b %v", s.Records(), ids("a"), ids("b"))
	}
	add("b", 2, 3) // 13 > 10: the oldest (a/1, then b/1 by sender order at equal start) goes
	if s.Records() != 9 || !slices.Equal(ids("a"), []int64{2}) || !slices.Equal(ids("b"), []int64{1, 2}) {
		t.Fatalf("after eviction: %d records, a %v, b %v, want 9, [2], [1 2]", s.Records(), ids("a"), ids("b"))
	}
	add("b", 2, 1) // a resend replaces: 9 - 3 + 1
	if s.Records() != 7 {
		t.Fatalf("after a resend: %d records, want 7", s.Records())
	}
	add("a", 3, 25) // larger than the cap alone: everything else goes, it stays
	if s.Records() != 25 || !slices.Equal(ids("a"), []int64{3}) || len(ids("b")) != 0 {
		t.Fatalf("one huge interval: %d records, a %v, b %v", s.Records(), ids("a"), ids("b"))
	}
	// keep still applies per sender, and the count follows it.
	k := NewBoundedStore(2, 1000)
	for id := int64(1); id <= 5; id++ {
		k.Add(&results.Interval{Sender: "a", Interval: id, StartNS: id, Flows: make([]results.FlowRecord, 3)})
	}
	if k.Records() != 6 {
		t.Fatalf("keep 2 of 3-record intervals: %d records, want 6", k.Records())
	}
}
