package wire

import (
	"context"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/interval"
)

// windowHandler is a recHandler whose receiver chooses hold windows.
type windowHandler struct {
	*recHandler
	plan *interval.WindowPlan
}

func (h *windowHandler) Windows(string) WindowSource { return h.plan }

// TestWindowsReachTheSender: the hold windows a receiver's plan announces
// reach the sender's window table over the stream, those announced
// before the sender connected first, then each new one.
func TestWindowsReachTheSender(t *testing.T) {
	p := testParams()
	p.MaxDelay = int64(time.Second)
	plan := interval.NewWindowPlan(p, 1)
	plan.Observe(0, float64(100*time.Millisecond), false) // target 200 ms
	// A receiver's capture builder: advancing past a boundary's hold ends
	// it, and the plan announces its window.
	rb, err := interval.NewReceiverBuilderPlan(p, 1763000000*p.T, false, plan)
	if err != nil {
		t.Fatal(err)
	}
	announce := func(b int64) int64 {
		rb.Advance(b*p.T+p.T/2, func(s *interval.ReceiverInterval) { s.Release() })
		ws, _, _, _ := plan.Announced(0)
		for _, w := range ws {
			if w.Boundary == b {
				return w.W
			}
		}
		t.Fatalf("boundary %d: no window announced", b)
		return 0
	}
	before := announce(1763000001)
	h := &windowHandler{recHandler: newRecHandler(), plan: plan}
	addr, _ := startServer(t, nil, serverConfig(), h, nil, 1<<20)
	table := interval.NewWindowTable()
	cfg := clientConfig(addr, "s1")
	cfg.Windows = table
	c, err := NewClient(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	done := runClient(ctx, c)
	wait := func(b, want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if w, ok := table.Get(b); ok {
				if w != want {
					t.Fatalf("boundary %d: window %v, want %v", b, time.Duration(w), time.Duration(want))
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("boundary %d: no window reached the sender in 5 s", b)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(1763000001, before)
	after := announce(1763000002)
	wait(1763000002, after)
	if before != int64(200*time.Millisecond) || after != before {
		t.Errorf("windows %v, %v: want the plan's 200 ms", time.Duration(before), time.Duration(after))
	}
	c.Close()
	if err := waitErr(t, done, 8*time.Second); err != nil {
		t.Fatal(err)
	}
	// Run closed the table: a builder waiting for a window stops waiting.
	if _, ok := table.Get(1763000003); ok {
		t.Error("a window never announced is in the table")
	}
}
