package receiver

import (
	"net"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
)

// TestIntervalsOutsideTheWindowRefused: a sender's stream carries an
// interval a million intervals in the future and one a million in the
// past, then the honest ones. The real receiver refuses both far ones
// (counted, acknowledged, never matched or published) and matches every
// honest interval exactly.
func TestIntervalsOutsideTheWindowRefused(t *testing.T) {
	f := newFaultFixture(t)
	f.clock = func() time.Time { return time.Unix(0, f.start) } // the trace's time
	ivs := f.senderIntervals(t, f.start)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run := f.startReceiver(t, lis, nil, "")
	c := f.client(t, lis.Addr().String())
	done, cancel := runClient(c)
	defer cancel()
	far := []int64{ivs[0].ID + 1_000_000, ivs[0].ID - 1_000_000}
	for _, id := range far {
		sk, err := interval.NewSketches(f.params)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Submit(finished(t, &interval.SenderInterval{ID: id, Sk: sk}), disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	for _, si := range ivs {
		if err := c.Submit(si, disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	waitClient(t, done, 20*time.Second)
	run.wait(t, 20*time.Second)

	for _, id := range far {
		if iv := run.pub.get(id); iv != nil {
			t.Errorf("far interval %d published (%s)", id, iv.Outcome)
		}
	}
	for _, id := range f.ids {
		if id > ivs[len(ivs)-1].ID {
			break
		}
		if o := run.pub.outcome(t, id); o != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", id, o)
		}
		f.checkLink(t, run.pub.get(id), 0)
	}
	if n := counterValue(t, run.rx, "lds_frame_errors_total", "reason", "interval_out_of_window"); n != 2 {
		t.Errorf("lds_frame_errors_total{reason=\"interval_out_of_window\"} = %v, want 2", n)
	}
	if st := c.Stats(); st.Buffered != 0 || st.Dropped != 0 || st.Acked != uint64(len(ivs)+2) {
		t.Errorf("client stats %+v: want every interval acknowledged (the far ones too), none dropped", st)
	}
}
