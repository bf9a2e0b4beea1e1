package sender

import (
	"testing"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/wire"
)

// TestLostLogsAnswerOnceAndBounded: an interval's packet log answers the
// receiver's question once (then it is gone), an interval never kept or
// pushed out by newer ones is answered gone, and no more than
// LostLogIntervals logs are kept.
func TestLostLogsAnswerOnceAndBounded(t *testing.T) {
	p := interval.Params{T: int64(time.Second), MaxDelay: int64(time.Second), Guard: int64(time.Millisecond)}
	l := newLostLogs(p)
	keep := LostLogIntervals(p)
	if keep != 5 {
		t.Fatalf("LostLogIntervals = %d for 1 s intervals and max_delay 1 s, want 5", keep)
	}
	for id := int64(10); id < 10+int64(keep)+3; id++ {
		l.add(id, []*interval.PacketLog{{ID: id}})
	}
	if n := len(l.ids); n != keep {
		t.Fatalf("%d logs kept, want %d", n, keep)
	}
	if _, gone := l.answer(10, []uint64{1}); !gone {
		t.Error("an interval pushed out by newer ones: answered, want gone")
	}
	last := int64(10 + keep + 2)
	b, gone := l.answer(last, []uint64{1, 2})
	if gone {
		t.Fatal("a kept interval: gone")
	}
	if ps, err := wire.DecodeLostAnswer(b, map[uint64]bool{1: true, 2: true}, last*p.T, p.T); err != nil || len(ps) != 0 {
		t.Errorf("answer %v, %v: want an empty, valid answer (nothing logged)", ps, err)
	}
	if _, gone := l.answer(last, []uint64{1}); !gone {
		t.Error("asked twice: answered again, want gone (a receiver asks once)")
	}
	l.close()
	if len(l.ids) != 0 || len(l.byID) != 0 {
		t.Errorf("close kept %d logs", len(l.ids))
	}
}
