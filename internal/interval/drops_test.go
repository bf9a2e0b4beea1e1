package interval

import (
	"fmt"
	"testing"
)

// TestDropLedger: which intervals a read with drops reaches. T = 1 s; each
// step is one interval closed, with the cumulative counter and the wall
// clock of its read.
func TestDropLedger(t *testing.T) {
	const T = int64(1e9)
	type step struct {
		id            int64
		total         uint64
		now           int64 // ns
		delta, affect uint64
	}
	tests := []struct {
		name  string
		reach int64
		steps []step
	}{
		{"no drops flag nothing", 0, []step{
			{10, 0, 11*T + 1e6, 0, 0}, {11, 0, 12*T + 1e6, 0, 0},
		}},
		// Closing interval 11 at 12.001 s: the drops since the last read
		// can be packets of 11 or of 12, which has begun.
		{"a read on time flags its interval and the one begun", 0, []step{
			{10, 0, 11*T + 1e6, 0, 0}, {11, 5, 12*T + 1e6, 5, 5}, {12, 5, 13*T + 1e6, 0, 5}, {13, 5, 14*T + 1e6, 0, 0},
		}},
		// A capture stopped for 3 s during interval 11 closes it only
		// when it resumes, at 14.2 s: its drops can be packets of 11 up
		// to 14, and the later reads of those intervals (the ring's
		// backlog read fast) find no new drops.
		{"a late read reaches to the wall clock", 0, []step{
			{10, 0, 11*T + 1e6, 0, 0}, {11, 300, 14*T + 2e8, 300, 300}, {12, 300, 14*T + 3e8, 0, 300},
			{13, 300, 14*T + 4e8, 0, 300}, {14, 300, 15*T + 1e6, 0, 300}, {15, 300, 16*T + 1e6, 0, 0},
		}},
		// The sender's reach (max_delay + guard = 1.01 s): a packet it
		// missed is counted by the receiver up to then.
		{"the sender's reach covers the receiver's count", 1.01e9, []step{
			{10, 0, 11*T + 1e6, 0, 0}, {11, 7, 12*T + 1e6, 7, 7}, {12, 7, 13*T + 1e6, 0, 7}, {13, 7, 14*T + 1e6, 0, 7},
			{14, 7, 15*T + 1e6, 0, 0},
		}},
		{"a read near a boundary reaches the next interval", 5e6, []step{
			{11, 2, 11*T + 999e6, 2, 2}, {12, 2, 13*T + 1e6, 0, 2}, {13, 2, 14*T + 1e6, 0, 0},
		}},
		{"overlapping reads add up", 0, []step{
			{11, 100, 13*T + 5e8, 100, 100}, {12, 150, 13*T + 6e8, 50, 150}, {13, 150, 14*T + 1e6, 0, 150}, {14, 150, 15*T + 1e6, 0, 0},
		}},
		{"the first read counts what came before it", 0, []step{
			{20, 9, 21*T + 1e6, 9, 9}, {21, 9, 22*T + 1e6, 0, 9}, {22, 9, 23*T + 1e6, 0, 0},
		}},
		{"a counter that goes back is no drop", 0, []step{
			{10, 5, 11*T + 1e6, 5, 5}, {11, 3, 12*T + 1e6, 0, 5}, {12, 6, 13*T + 1e6, 1, 1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := DropLedger{T: T, Reach: tc.reach}
			for i, s := range tc.steps {
				d, a := l.Read(s.id, s.total, s.now)
				if d != s.delta || a != s.affect {
					t.Errorf("step %d (interval %d, total %d, read at %.3fs): delta %d affecting %d, want %d %d",
						i, s.id, s.total, float64(s.now)/1e9, d, a, s.delta, s.affect)
				}
			}
			if len(l.reads) > len(tc.steps) {
				t.Errorf("%d reads remembered", len(l.reads))
			}
		})
	}
}

// TestDropLedgerBounded: a wall clock far ahead of the packets' time keeps
// every read open; the ledger stays bounded and still flags every interval
// with all the drops.
func TestDropLedgerBounded(t *testing.T) {
	const T = int64(1e9)
	l := DropLedger{T: T}
	ahead := int64(1e6) * T // the wall clock 11 days past the packets
	var total uint64
	for id := int64(0); id < 1000; id++ {
		total += 2
		_, a := l.Read(id, total, ahead+id*T)
		if a != total {
			t.Fatalf("interval %d: affecting %d, want every drop so far (%d)", id, a, total)
		}
	}
	if len(l.reads) > maxDropReads {
		t.Fatalf("%d reads remembered, want at most %d", len(l.reads), maxDropReads)
	}
}

// TestDropLedgerNeverUnderFlags: every drop, whatever interval its packet
// belongs to between the previous read and the wall clock of the read that
// counts it (plus the reach), flags that interval when it is closed.
func TestDropLedgerNeverUnderFlags(t *testing.T) {
	const T = int64(1e9)
	for _, reach := range []int64{0, 10e6, 1.01e9, 2.5e9} {
		for lag := int64(0); lag <= 5e9; lag += 7e8 {
			t.Run(fmt.Sprintf("reach=%d/lag=%d", reach, lag), func(t *testing.T) {
				l := DropLedger{T: T, Reach: reach}
				// Interval 10 is closed late (the capture lagged by
				// lag); a drop at wall time w in (prev read, read]
				// can belong to any interval up to floor((w+reach)/T).
				prevRead := int64(10*T + 1e6)
				l.Read(9, 0, prevRead)
				read := 11*T + 1e6 + lag
				flagged := map[int64]bool{}
				if _, a := l.Read(10, 1, read); a > 0 {
					flagged[10] = true
				}
				for id := int64(11); id <= 20; id++ {
					if _, a := l.Read(id, 1, max(read, (id+1)*T+1e6)); a > 0 {
						flagged[id] = true
					}
				}
				for w := prevRead; w <= read; w += 1e7 {
					for id := w / T; id <= (w+reach)/T; id++ {
						if id >= 10 && !flagged[id] {
							t.Fatalf("a drop at %.2fs can hold a packet of interval %d, which is not flagged (flagged %v)", float64(w)/1e9, id, flagged)
						}
					}
				}
			})
		}
	}
}
