package tap

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sync/errgroup"

	"github.com/lds-net/lds/internal/capture"
)

// script is a Source that plays a list of events: n frames, a poll
// timeout, the end of the file or an error.
type script struct {
	frame  []byte
	events []event
	ts     int64
}

type event struct {
	frames int   // this many frames, then the next event
	err    error // when frames is 0: capture.ErrTimeout, io.EOF or another error
}

func (s *script) ReadPacket([]byte) ([]byte, int64, int, error) {
	if len(s.events) == 0 {
		return nil, 0, 0, io.EOF
	}
	e := &s.events[0]
	if e.frames > 0 {
		e.frames--
		if e.frames == 0 {
			s.events = s.events[1:]
		}
		s.ts += 1000
		return s.frame, s.ts, len(s.frame), nil
	}
	s.events = s.events[1:]
	return nil, 0, 0, e.err
}
func (s *script) LinkType() layers.LinkType         { return layers.LinkTypeEthernet }
func (s *script) Stats() (capture.DropStats, error) { return capture.DropStats{}, nil }
func (s *script) Close() error                      { return nil }

func udpFrame(t testing.TB) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{10, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: 4000, DstPort: 5000}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(make([]byte, 100))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// calls counts what Run asked of the callbacks.
type calls struct {
	packets, flushes, stops, polls int
	advances                       []int64
}

func TestLoop(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		events    []event
		replay    bool
		cancelled bool // ctx ended before Run
		want      calls
		advanced  bool // Advance was called with the wall clock less IdleSlack
		err       error
		logged    string // part of the log, "" for none
	}{
		{"file to its end", []event{{frames: 2500}}, true, false, calls{packets: 2500, flushes: 1, polls: 3}, false, nil, `msg="x capture ended" packets=2500`},
		{"idle live link", []event{{frames: 3}, {err: capture.ErrTimeout}, {frames: 1}, {err: capture.ErrTimeout}}, false, false,
			calls{packets: 4, flushes: 1, polls: 3}, true, nil, "packets=4"},
		{"idle replay: the wall clock closes nothing", []event{{err: capture.ErrTimeout}}, true, false, calls{flushes: 1, polls: 2}, false, nil, "packets=0"},
		{"stop request on an idle link", []event{{err: capture.ErrTimeout}, {frames: 5}}, false, true, calls{stops: 1}, false, nil, ""},
		{"stop request seen every 1024 packets", []event{{frames: 5000}}, false, true, calls{packets: 1024, stops: 1}, false, nil, ""},
		{"source error", []event{{frames: 2}, {err: boom}}, false, false, calls{packets: 2}, false, boom, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := capture.NewParser(capture.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			var got calls
			l := Loop{Name: "x", Reader: capture.NewReader(&script{frame: udpFrame(t), events: tc.events}, p),
				Log: slog.New(slog.NewTextHandler(&logs, nil)), Replay: tc.replay,
				Packet:  func(*capture.Packet) { got.packets++ },
				Advance: func(now int64) { got.advances = append(got.advances, now) },
				Flush:   func() { got.flushes++ },
				Stop:    func() { got.stops++ },
				Poll:    func() { got.polls++ },
			}
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancelled {
				cancel()
			}
			defer cancel()
			before := time.Now().Add(-IdleSlack).UnixNano()
			err = l.Run(ctx)
			after := time.Now().Add(-IdleSlack).UnixNano()
			if !errors.Is(err, tc.err) || (tc.err != nil && err.Error() != "x capture: "+tc.err.Error()) {
				t.Errorf("Run = %v, want %v", err, tc.err)
			}
			if got.packets != tc.want.packets || got.flushes != tc.want.flushes || got.stops != tc.want.stops || got.polls != tc.want.polls {
				t.Errorf("calls %+v, want %+v", got, tc.want)
			}
			if tc.advanced != (len(got.advances) > 0) {
				t.Errorf("Advance called with %v, want a call: %v", got.advances, tc.advanced)
			}
			for _, now := range got.advances {
				if now < before || now > after {
					t.Errorf("Advance(%d), want the wall clock less %v: in [%d, %d]", now, IdleSlack, before, after)
				}
			}
			if tc.logged == "" && logs.Len() > 0 || !strings.Contains(logs.String(), tc.logged) {
				t.Errorf("log %q, want it to contain %q", logs.String(), tc.logged)
			}
		})
	}
}

func TestWait(t *testing.T) {
	other := errors.New("other")
	for _, tc := range []struct {
		name string
		ret  error
		want error
	}{{"done is success", ErrDone, nil}, {"nil", nil, nil}, {"an error stays", other, other}} {
		t.Run(tc.name, func(t *testing.T) {
			var g errgroup.Group
			g.Go(func() error { return tc.ret })
			if err := Wait(&g); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("Wait = %v, want %v", err, tc.want)
			}
		})
	}
}

// BenchmarkLoop is the loop's own cost a packet: reading from a source in
// memory, parsing, and the call of an empty Packet callback.
func BenchmarkLoop(b *testing.B) {
	p, err := capture.NewParser(capture.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	l := Loop{Name: "x", Reader: capture.NewReader(&script{frame: udpFrame(b), events: []event{{frames: b.N}}}, p),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Packet: func(*capture.Packet) {}, Advance: func(int64) {}, Flush: func() {}, Stop: func() {}}
	b.ReportAllocs()
	b.ResetTimer()
	if err := l.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// ringScript is a script whose frames of one event are in the capture
// buffer at once, as a ring block's are: Buffered counts them.
type ringScript struct{ script }

func (s *ringScript) Buffered() int {
	if len(s.events) == 0 {
		return 0
	}
	return s.events[0].frames
}

// TestLoopBatch: with Batch set, every packet comes once and in order,
// no batch waits past the frames the buffer holds (a batch never spans a
// poll), none is longer than BatchSize, and the stop, flush and poll
// calls are those of the packet-at-a-time loop.
func TestLoopBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		events  []event
		replay  bool
		want    calls
		batches []int
	}{
		{"ring blocks then idle", []event{{frames: 70}, {err: capture.ErrTimeout}, {frames: 5}, {err: capture.ErrTimeout}}, false,
			calls{packets: 75, flushes: 1, polls: 3}, []int{32, 32, 6, 5}},
		{"one packet at a time", []event{{frames: 1}, {err: capture.ErrTimeout}, {frames: 1}}, false,
			calls{packets: 2, flushes: 1, polls: 2}, []int{1, 1}},
		{"a poll every 1024 packets", []event{{frames: 2100}}, true, calls{packets: 2100, flushes: 1, polls: 3}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := capture.NewParser(capture.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			var got calls
			var sizes []int
			last := int64(0)
			l := Loop{Name: "x", Reader: capture.NewReader(&ringScript{script{frame: udpFrame(t), events: tc.events}}, p),
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Replay: tc.replay,
				Packet: func(*capture.Packet) { t.Error("Packet called with Batch set") },
				Batch: func(pkts []capture.Packet) {
					sizes = append(sizes, len(pkts))
					for _, pk := range pkts {
						if pk.TS != last+1000 {
							t.Fatalf("packet at %d after %d: lost or out of order", pk.TS, last)
						}
						last = pk.TS
					}
					got.packets += len(pkts)
				},
				Advance: func(int64) {},
				Flush:   func() { got.flushes++ },
				Stop:    func() { got.stops++ },
				Poll:    func() { got.polls++ },
			}
			if err := l.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got.packets != tc.want.packets || got.flushes != tc.want.flushes || got.stops != tc.want.stops || got.polls != tc.want.polls {
				t.Errorf("calls %+v, want %+v", got, tc.want)
			}
			for _, n := range sizes {
				if n < 1 || n > BatchSize {
					t.Errorf("a batch of %d packets, want 1..%d", n, BatchSize)
				}
			}
			if tc.batches != nil && !slices.Equal(sizes, tc.batches) {
				t.Errorf("batches %v, want %v", sizes, tc.batches)
			}
		})
	}
}
