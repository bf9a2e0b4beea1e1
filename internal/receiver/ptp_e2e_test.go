package receiver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/gen"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/internal/testutil/ptp4l"
)

// paced replays a capture in real time, as a live source: a packet is
// handed out once the wall clock reaches its timestamp; until then (and
// after ctx ends) it answers capture.ErrTimeout, like an idle interface.
type paced struct {
	capture.Source
	ctx  context.Context
	data []byte
	ts   int64
	wl   int
	have bool
}

func newPaced(ctx context.Context, s capture.Source) *paced { return &paced{Source: s, ctx: ctx} }

func (p *paced) ReadPacket(buf []byte) ([]byte, int64, int, error) {
	if !p.have {
		data, ts, wl, err := p.Source.ReadPacket(buf)
		if err != nil {
			return data, ts, wl, err
		}
		p.data, p.ts, p.wl, p.have = append(p.data[:0], data...), ts, wl, true
	}
	if d := time.Until(time.Unix(0, p.ts)); d > 0 {
		select {
		case <-time.After(min(d, 100*time.Millisecond)):
		case <-p.ctx.Done():
		}
		if time.Now().UnixNano() < p.ts {
			return nil, 0, 0, capture.ErrTimeout
		}
	}
	p.have = false
	return p.data, p.ts, p.wl, nil
}

func (p *paced) LinkType() layers.LinkType { return p.Source.LinkType() }

// TestClockUnsyncedWithholdsDelays: both daemons check a real ptp4l slave
// (free_running, no CAP_SYS_TIME); while its master runs the intervals are
// published with delays and an error bound; once the master is killed the
// following intervals are flagged clock_unsynced, their delays withheld and
// their counts still published.
func TestClockUnsyncedWithholdsDelays(t *testing.T) {
	ptp4l.Require(t)
	pair := ptp4l.StartPair(t, "rx")
	pcfg := ptp.DefaultConfig()
	pcfg.Socket, pcfg.PollInterval, pcfg.Timeout, pcfg.Grace = pair.SlaveSock, 100*time.Millisecond, 300*time.Millisecond, time.Second
	chk, err := ptp.New(pcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if s, _ := chk.Poll(context.Background()); s.State == ptp.StateSynced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ptp4l slave never synced:\n%s", pair.Slave.Tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	chk.Close()

	// A live-paced trace of 7 intervals starting at the next second.
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := gen.DefaultScenario()
	sc.StartNS = (time.Now().UnixNano()/1e9 + 1) * 1e9
	sc.Duration, sc.Flows, sc.RatePPS = 7*time.Second, 40, 1000
	sc.HeavyLoss = gen.HeavyLoss{}
	if _, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, log); err != nil {
		t.Fatal(err)
	}

	rc := config.DefaultReceiver()
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.Lateness = 3 * time.Second
	rc.PTP = pcfg
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", b
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	open := func(p string) capture.Source {
		s, err := capture.OpenFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return newPaced(ctx, s)
	}
	var mu sync.Mutex
	got := map[int64]*results.Interval{}
	grpcLis, _ := net.Listen("tcp", "127.0.0.1:0")
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{open(b)}, Listener: grpcLis, NoHTTP: true,
		CaptureStart: sc.StartNS, OnInterval: func(iv *results.Interval) {
			mu.Lock()
			got[iv.Interval] = iv
			mu.Unlock()
		}}, log)
	if err != nil {
		t.Fatal(err)
	}
	scfg := config.DefaultSender()
	scfg.Common = rc.Common
	scfg.Capture.Source.File = a
	scfg.Sender.ID, scfg.Sender.Receiver, scfg.Sender.TLS.Plaintext = "edge-a", grpcLis.Addr().String(), true
	tx, err := sender.New(scfg, sender.Options{Sources: []capture.Source{open(a)}, NoHTTP: true, CaptureStart: sc.StartNS}, log)
	if err != nil {
		t.Fatal(err)
	}
	go rx.Run(ctx)
	go tx.Run(ctx)

	// Kill the master in the middle of the fourth interval.
	first := sc.StartNS / 1e9
	killAt := time.Unix(first+3, 500e6)
	time.Sleep(time.Until(killAt))
	pair.Master.Kill()
	killedNS := time.Now().UnixNano()

	last := first + 6
	for time.Now().Before(time.Unix(last+10, 0)) {
		mu.Lock()
		n := got[last]
		mu.Unlock()
		if n != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	synced, unsynced := 0, 0
	for id := first; id <= last; id++ {
		iv := got[id]
		if iv == nil {
			t.Errorf("interval %d never published", id)
			continue
		}
		end := (id+1)*1e9 + int64(rc.MaxDelay)
		withDelay := 0
		for _, f := range iv.Flows {
			if f.DelayNS != nil {
				withDelay++
			}
			if f.Packets <= 0 {
				t.Errorf("interval %d: counts must publish whatever the clock", id)
			}
		}
		switch {
		case end < killedNS-int64(time.Second):
			// Closed well before the master died: synced, with delays and a bound.
			if iv.Outcome != results.OutcomeMatched || withDelay == 0 {
				t.Errorf("interval %d (before the kill): outcome %s, %d flows with delay", id, iv.Outcome, withDelay)
			}
			for _, f := range iv.Flows {
				if f.ErrorNS == nil {
					t.Errorf("interval %d: synced record without an error bound", id)
					break
				}
			}
			synced++
		case iv.Interval*1e9 > killedNS+int64(2*time.Second):
			// Begun after the slave lost its master: withheld.
			if iv.Outcome != results.OutcomeUnsynced || withDelay != 0 {
				t.Errorf("interval %d (after the kill): outcome %s, %d flows with delay", id, iv.Outcome, withDelay)
			}
			unsynced++
		}
	}
	if synced < 2 || unsynced < 1 {
		t.Errorf("checked %d synced and %d unsynced intervals: too few", synced, unsynced)
	}
	t.Logf("%d intervals synced with delays, %d clock_unsynced without (master killed at +%.1fs)", synced, unsynced, float64(killedNS-sc.StartNS)/1e9)
}
