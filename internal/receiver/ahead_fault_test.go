package receiver

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
)

// TestAheadIntervalsPoisonNoGenuine reproduces the poisoning on the real
// receiver over loopback: an authenticated sender's stream first carries
// every interval id of the trace while they are 30 s ahead of the
// receiver's clock (inside receiver.max_interval_skew), with empty
// sketches; then the clock reaches the trace and the genuine intervals
// come. Every genuine interval is matched with counts equal to the
// generator's truth; the early ones are counted as superseded.
func TestAheadIntervalsPoisonNoGenuine(t *testing.T) {
	f := newFaultFixture(t)
	ivs := f.senderIntervals(t, f.start)
	f.cfg.Receiver.MaxPending = len(ivs) // held ahead: at most this many
	var clock atomic.Int64
	clock.Store(f.start - int64(30*time.Second))
	f.clock = func() time.Time { return time.Unix(0, clock.Load()) }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run := f.startReceiver(t, lis, nil, "")
	c := f.client(t, lis.Addr().String())
	done, cancel := runClient(c)
	defer cancel()
	empty := func(id int64) *interval.SenderInterval {
		sk, err := interval.NewSketches(f.params)
		if err != nil {
			t.Fatal(err)
		}
		return finished(t, &interval.SenderInterval{ID: id, Sk: sk})
	}
	for _, si := range ivs {
		if err := c.Submit(empty(si.ID), disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	// One more ahead than may be held: refused, which tells that the
	// match stage has taken every one before it.
	if err := c.Submit(empty(ivs[len(ivs)-1].ID+1), disabledClock()); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, run.rx, "lds_interval_refusals_total", interval.RefusedEarlyOverflow, 1)
	run.pub.mu.Lock()
	n := len(run.pub.ivs)
	run.pub.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d intervals published while every id was ahead of the receiver's clock", n)
	}
	clock.Store(ivs[len(ivs)-1].ID*f.params.T + int64(2*time.Second)) // real time reaches the trace
	for _, si := range ivs {
		if err := c.Submit(si, disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	waitClient(t, done, 20*time.Second)
	run.wait(t, 30*time.Second)
	for _, si := range ivs {
		if _, ok := f.sent[si.ID]; !ok {
			continue
		}
		if o := run.pub.outcome(t, si.ID); o != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", si.ID, o)
		}
		f.checkLink(t, run.pub.get(si.ID), 0)
	}
	if n := counterValue(t, run.rx, "lds_interval_refusals_total", "reason", interval.RefusedSupersededEarly); n != float64(len(ivs)) {
		t.Errorf("superseded_early counted %v, want %d", n, len(ivs))
	}
	if n := counterValue(t, run.rx, "lds_interval_refusals_total", "reason", interval.RefusedReceiverAfterFinal); n != 0 {
		t.Errorf("%v receiver halves came after their interval was final", n)
	}
}

// waitMetric waits (bounded) until the counter reaches want.
func waitMetric(t *testing.T, rx *Receiver, name, reason string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for counterValue(t, rx, name, "reason", reason) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s{reason=%q} did not reach %v", name, reason, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
