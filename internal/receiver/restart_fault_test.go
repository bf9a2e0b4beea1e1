package receiver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lds-net/lds/internal/capture"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/wire"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
	"github.com/lds-net/lds/test/testutil"
)

// TestReceiverRestartMidRun: the receiver is killed after it has matched
// the first intervals; the sender keeps finishing intervals into its
// resend buffer; a new receiver on the same address gets every one of
// them, and between the two receivers every interval is matched exactly once.
func TestReceiverRestartMidRun(t *testing.T) {
	f := newFaultFixture(t)
	ivs := f.senderIntervals(t, f.start)
	ids := f.ids[:5]

	lisA, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lisA.Addr().String()
	a := f.startReceiver(t, lisA, nil, "")
	c := f.client(t, addr)
	done, cancel := runClient(c)
	defer cancel()

	for _, si := range ivs[:3] {
		if err := c.Submit(si, disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "receiver A to match the first three intervals", 5*time.Second, func() bool {
		return a.pub.has(ids[0], results.OutcomeMatched) && a.pub.has(ids[1], results.OutcomeMatched) && a.pub.has(ids[2], results.OutcomeMatched)
	})
	testutil.WaitFor(t, "acks of the first three intervals", 3*time.Second, func() bool { return c.Stats().Acked == 3 })

	// Kill receiver A; the sender finishes the rest of its intervals meanwhile.
	a.stop()
	select {
	case <-a.done:
		a.done <- nil
	case <-time.After(5 * time.Second):
		t.Fatal("receiver A did not stop")
	}
	for _, si := range ivs[3:] {
		if err := c.Submit(si, disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a few failed reconnects
	if st := c.Stats(); st.Buffered != len(ivs)-3 || st.Connected {
		t.Fatalf("with the receiver down the client holds %d intervals (connected %v), want %d", st.Buffered, st.Connected, len(ivs)-3)
	}

	lisB, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("re-listening on %s: %v", addr, err)
	}
	b := f.startReceiver(t, lisB, nil, "")
	c.Close()
	waitClient(t, done, 10*time.Second)
	b.wait(t, 10*time.Second)

	for i, id := range ids {
		oa, ob := a.pub.outcome(t, id), b.pub.outcome(t, id)
		matchedA, matchedB := oa == results.OutcomeMatched, ob == results.OutcomeMatched
		if matchedA == matchedB {
			t.Errorf("interval %d: outcome %q at A, %q at B: want matched at exactly one", id, oa, ob)
			continue
		}
		if i < 3 {
			if !matchedA || ob != results.OutcomeNoSender {
				t.Errorf("interval %d: %q at A, %q at B; want matched at A, no sender sketch at B", id, oa, ob)
			}
			f.checkLink(t, a.pub.get(id), 0)
			continue
		}
		// The first interval B matched starts at a boundary whose sender
		// list went to A: packets near it may be placed by receive time.
		slack := uint64(0)
		if i == 3 {
			slack = f.nearBoundary[id]
		}
		f.checkLink(t, b.pub.get(id), slack)
	}
	if st := c.Stats(); st.Acked != uint64(len(ivs)) || st.Buffered != 0 || st.Dropped != 0 {
		t.Errorf("client stats %+v: want all %d acknowledged, none buffered or dropped", st, len(ivs))
	}
}

// faultHandler stands between the wire server and a real receiver's
// stream stage and breaks the stream at chosen intervals after the
// receiver has taken them: the acknowledgement is lost, as when a
// connection drops.
type faultHandler struct {
	*streams
	mu         sync.Mutex
	deliveries map[int64]int
	haves      [][]int64
	// breakAfter, on the first delivery of an interval, runs after the
	// receiver took it; the stream then ends without an Ack.
	breakAfter map[int64]func()
}

func (h *faultHandler) Connected(sender string, instance uint64) ([]int64, error) {
	have, err := h.streams.Connected(sender, instance)
	h.mu.Lock()
	h.haves = append(h.haves, slices.Clone(have))
	h.mu.Unlock()
	return have, err
}

func (h *faultHandler) Interval(sender string, r *wire.Result) error {
	if err := h.streams.Interval(sender, r); err != nil || r.Kind != wire.Complete {
		return err
	}
	id := r.ID
	h.mu.Lock()
	h.deliveries[id]++
	n := h.deliveries[id]
	fn := h.breakAfter[id]
	h.mu.Unlock()
	if fn != nil && n == 1 {
		fn()
		return errors.New("injected fault: connection lost before the Ack")
	}
	return nil
}

// TestReceiverDropsResentDuplicates: acknowledgements are lost twice; the
// sender resends. An interval resent while still pending is a duplicate
// the matcher drops (and counts); one resent after it became final is
// named in HelloAck.have and never sent again. Every interval is published
// exactly once, matched, with exact link totals.
func TestReceiverDropsResentDuplicates(t *testing.T) {
	f := newFaultFixture(t)
	// Without the lost-packet table: the fault below holds the stream's
	// reading goroutine until the interval is published, and a table would
	// make its publication wait for the sender's answer on that very
	// stream (the second round, docs/protocol.md "Lost packets").
	f.cfg.Lost.Capacity, f.params.LostCells = 0, 0
	ivs := f.senderIntervals(t, f.start)
	ids := f.ids[:5]
	if len(ivs) < 5 || ivs[4].ID != ids[4] {
		t.Fatalf("sender intervals do not line up with the truth's: %d", len(ivs))
	}

	// The receiver pipeline runs on its own listener (unused); the sender
	// reaches it through a second wire server whose handler injects faults.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src, err := capture.OpenFile(f.receiverPcap)
	if err != nil {
		t.Fatal(err)
	}
	gate := &gatedSource{Source: src, open: make(chan struct{})}
	t.Cleanup(gate.release)
	run := f.startReceiver(t, lis, gate, "")
	h := &faultHandler{streams: run.rx.streams, deliveries: map[int64]int{}, breakAfter: map[int64]func(){
		// Still pending (the receiver has not captured it yet): a resend is a duplicate.
		ids[1]: func() {},
		// Final before the stream breaks: the next HelloAck names it.
		ids[3]: func() {
			gate.release()
			// On the server's goroutine: no t.Fatal here.
			if !eventually(5*time.Second, func() bool { return run.pub.get(ids[3]) != nil }) {
				t.Errorf("interval %d not final 5s after the capture was released", ids[3])
			}
		},
	}}
	faultLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(wire.ServerOptions(nil, f.cfg.Receiver.MaxFrameBytes)...)
	ldsv1.RegisterSketchExchangeServer(srv, wire.NewServer(wire.ServerConfig{Fingerprint: f.cfg.Fingerprint(), Seed: f.cfg.Sketch.Seed, Params: f.params,
		Version: "test", Limits: wire.Limits{MaxSketchBytes: f.cfg.Receiver.MaxSketchBytes,
			MaxCells: f.params.Sketch.Rows*f.params.Sketch.Columns + 1<<22, MaxClasses: f.params.Classes}}, h, testLogger(t, "faults")))
	go func() { _ = srv.Serve(faultLis) }()
	t.Cleanup(srv.Stop)

	c := f.client(t, faultLis.Addr().String())
	done, cancel := runClient(c)
	defer cancel()
	for _, si := range ivs {
		if err := c.Submit(si, disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	waitClient(t, done, 10*time.Second)
	run.wait(t, 10*time.Second)

	for _, id := range f.ids {
		if id > ivs[len(ivs)-1].ID {
			break
		}
		if o := run.pub.outcome(t, id); o != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", id, o)
		}
		f.checkLink(t, run.pub.get(id), 0)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		want := 1
		if id == ids[1] {
			want = 2 // resent while pending
		}
		if h.deliveries[id] != want {
			t.Errorf("interval %d reached the receiver %d times, want %d", id, h.deliveries[id], want)
		}
	}
	if len(h.haves) != 3 || !slices.Contains(h.haves[2], ids[3]) {
		t.Errorf("HelloAck.have per connection %v: want 3 connections, the last naming %d", h.haves, ids[3])
	}
	if n := counterValue(t, run.rx, "lds_intervals_total", "outcome", string(results.OutcomeDuplicate)); n != 1 {
		t.Errorf("duplicates counted %v, want 1", n)
	}
	checkEstimationsTimed(t, run.rx)
	if st := c.Stats(); st.Buffered != 0 || st.Dropped != 0 {
		t.Errorf("client stats %+v: want nothing buffered or dropped", st)
	}
}

// TestSenderRestartFirstIntervalPartial: the sender crashes and a new
// instance starts capturing in the middle of an interval. That interval is
// flagged and published as partial, never as matched nor in the results
// file; the intervals around it are exact.
func TestSenderRestartFirstIntervalPartial(t *testing.T) {
	f := newFaultFixture(t)
	ids := f.ids[:5]
	T := f.params.T
	before := f.senderIntervals(t, f.start)
	restartAt := ids[2]*T + 3*T/10
	after := f.senderIntervals(t, restartAt)
	if after[0].ID != ids[2] || !after[0].First || !after[0].Partial || after[1].First || after[1].Partial {
		t.Fatalf("restarted sender's intervals: first %d first=%v partial=%v; want %d flagged first and partial, only it",
			after[0].ID, after[0].First, after[0].Partial, ids[2])
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "results.jsonl")
	run := f.startReceiver(t, lis, nil, out)

	// First instance: two intervals, then it dies (no Close).
	c1 := f.client(t, lis.Addr().String())
	done1, cancel1 := runClient(c1)
	for _, si := range before[:2] {
		if err := c1.Submit(si, disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the first instance's intervals acknowledged", 5*time.Second, func() bool { return c1.Stats().Acked == 2 })
	cancel1()
	<-done1

	// Second instance: a new process, same sender id.
	c2 := f.client(t, lis.Addr().String())
	done2, cancel2 := runClient(c2)
	defer cancel2()
	for _, si := range after {
		if err := c2.Submit(si, disabledClock()); err != nil {
			t.Fatal(err)
		}
	}
	c2.Close()
	waitClient(t, done2, 10*time.Second)
	run.wait(t, 10*time.Second)

	last := after[len(after)-1].ID
	for _, id := range f.ids {
		if id > last {
			break
		}
		iv := run.pub.get(id)
		o := run.pub.outcome(t, id)
		if id == ids[2] {
			if o != results.OutcomePartial {
				t.Errorf("restart interval %d: outcome %q, want partial", id, o)
			}
			if iv != nil {
				for _, r := range iv.Flows {
					if !r.Partial {
						t.Errorf("restart interval %d: flow record %s not flagged partial", id, r.Key)
						break
					}
				}
				var sent uint64
				for _, l := range iv.Links {
					sent += l.Sent
				}
				if sent >= f.sent[id] {
					t.Errorf("restart interval %d: sender counted %d packets of %d: not partial", id, sent, f.sent[id])
				}
			}
			continue
		}
		if o != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", id, o)
		}
		f.checkLink(t, iv, 0)
	}

	// The results file holds only complete intervals.
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lines := 0
	for sc.Scan() {
		var r results.FlowRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		lines++
		if r.Interval == ids[2] || r.Partial {
			t.Fatalf("results file holds a record of the partial interval: %s", sc.Text())
		}
	}
	if lines == 0 {
		t.Error("results file is empty")
	}
}

// TestReceiverVoidsSeqGap: a hand-driven sender skips one seq inside an
// interval. The real receiver voids that interval (counted, not
// acknowledged, never published as matched) and keeps the stream.
func TestReceiverVoidsSeqGap(t *testing.T) {
	f := newFaultFixture(t)
	ivs := f.senderIntervals(t, f.start)
	ids := f.ids[:5]
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run := f.startReceiver(t, lis, nil, "")

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := ldsv1.NewSketchExchangeClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chal, err := st.Recv()
	if err != nil || chal.GetChallenge() == nil {
		t.Fatalf("no Challenge: %v", err)
	}
	nonce := make([]byte, wire.NonceBytes)
	if err := st.Send(&ldsv1.SenderFrame{Body: &ldsv1.SenderFrame_Hello{Hello: &ldsv1.Hello{SenderId: "tap-a",
		Fingerprint: f.cfg.Fingerprint(), Instance: 7, Nonce: nonce,
		SeedProof: wire.SeedProof(f.cfg.Sketch.Seed, chal.GetChallenge().GetNonce(), nonce, "tap-a")}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetHelloAck() == nil {
		t.Fatalf("no HelloAck: %v", err)
	}
	acks := make(chan []int64, 1)
	go func() {
		var got []int64
		for {
			m, err := st.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("stream ended with %v", err)
				}
				acks <- got
				return
			}
			if a := m.GetAck(); a != nil {
				got = append(got, a.Interval)
			}
		}
	}()
	seq := uint64(0)
	for _, si := range ivs {
		frames, err := wire.Encode(si, disabledClock(), 16<<10)
		if err != nil {
			t.Fatal(err)
		}
		for i, fr := range frames {
			seq++
			if si.ID == ids[2] && i == 1 {
				seq++ // one frame lost
			}
			fr.Seq = seq
			if err := st.Send(fr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := <-acks
	run.wait(t, 10*time.Second)

	var want []int64
	for _, si := range ivs {
		if si.ID != ids[2] {
			want = append(want, si.ID)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("acknowledged %v, want %v (all but the voided %d)", got, want, ids[2])
	}
	if n := counterValue(t, run.rx, "lds_intervals_total", "outcome", string(results.OutcomeVoidedGap)); n != 1 {
		t.Errorf("voided intervals counted %v, want 1", n)
	}
	checkEstimationsTimed(t, run.rx)
	if o := run.pub.outcome(t, ids[2]); o == results.OutcomeMatched || o == results.OutcomePartial {
		t.Errorf("voided interval %d published as %q", ids[2], o)
	}
	for i, id := range ids {
		if i == 2 {
			continue
		}
		if o := run.pub.outcome(t, id); o != results.OutcomeMatched {
			t.Errorf("interval %d: outcome %q, want matched", id, o)
		}
		slack := uint64(0)
		if i == 3 {
			slack = f.nearBoundary[id] // its start boundary's sender list was voided
		}
		f.checkLink(t, run.pub.get(id), slack)
	}
}
