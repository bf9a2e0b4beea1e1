package gen

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/tools/truth"
)

// capPkt is one packet read back from a capture, decoded by gopacket (an
// independent decoder), with the identity computed here from the fields that
// must not change between taps.
type capPkt struct {
	ts      int64
	wire    int
	id      string
	key     capture.FlowKey
	ttl     uint8
	tos     uint8
	vlan    int // -1 untagged
	macs    [2]string
	l4ck    uint16
	l4ckOK  bool // checksum verified (only when the whole packet was captured)
	full    bool
	v4ckOK  bool
	counter uint64
	hasCtr  bool
}

func readCapture(t *testing.T, path string) []capPkt {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var src interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	magic := make([]byte, 4)
	if _, err := io.ReadFull(fh, magic); err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(magic) == 0x0A0D0D0A {
		r, err := pcapgo.NewNgReader(fh, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			t.Fatal(err)
		}
		src = r
	} else {
		r, err := pcapgo.NewReader(fh)
		if err != nil {
			t.Fatal(err)
		}
		if r.Resolution() != gopacket.TimestampResolutionNanosecond {
			t.Fatalf("%s: resolution %v, want nanoseconds", path, r.Resolution())
		}
		if r.LinkType() != layers.LinkTypeEthernet {
			t.Fatalf("%s: link type %v", path, r.LinkType())
		}
		src = r
	}
	var out []capPkt
	for {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, decodePkt(t, data, ci))
	}
	return out
}

// testSum is a plain 16-bit ones-complement sum, written independently of
// the generator's.
func testSum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return s
}

func decodePkt(t *testing.T, data []byte, ci gopacket.CaptureInfo) capPkt {
	t.Helper()
	p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
	// Random payloads on well-known ports (53, 5060, ...) make gopacket's
	// application decoders fail; only a failure below L4 is a bad packet.
	if el := p.ErrorLayer(); el != nil && p.TransportLayer() == nil &&
		p.Layer(layers.LayerTypeICMPv4) == nil && p.Layer(layers.LayerTypeICMPv6) == nil {
		t.Fatalf("undecodable packet: %v", el.Error())
	}
	cp := capPkt{ts: ci.Timestamp.UnixNano(), wire: ci.Length, vlan: -1, full: ci.CaptureLength == ci.Length}
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	cp.macs = [2]string{eth.DstMAC.String(), eth.SrcMAC.String()}
	if q, ok := p.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q); ok {
		cp.vlan = int(q.VLANIdentifier)
	}
	var id bytes.Buffer
	var pseudo []byte
	var l4len int
	if ip4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		copy(cp.key.Src[:], ip4.SrcIP.To4())
		copy(cp.key.Dst[:], ip4.DstIP.To4())
		cp.key.Proto = uint8(ip4.Protocol)
		cp.ttl, cp.tos = ip4.TTL, ip4.TOS
		cp.v4ckOK = testSum(ip4.Contents) == 0xffff
		fmt.Fprintf(&id, "4|%s|%s|%d|%d|%d|%d|%d|", cp.key.SrcAddr(), cp.key.DstAddr(), ip4.Protocol, ip4.Id, ip4.Length, ip4.Flags, ip4.FragOffset)
		l4len = int(ip4.Length) - int(ip4.IHL)*4
		pseudo = append(append([]byte{}, ip4.SrcIP.To4()...), ip4.DstIP.To4()...)
		pseudo = append(pseudo, 0, uint8(ip4.Protocol), byte(l4len>>8), byte(l4len))
	} else if ip6, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		copy(cp.key.Src[:], ip6.SrcIP)
		copy(cp.key.Dst[:], ip6.DstIP)
		cp.key.V6 = true
		cp.key.Proto = uint8(ip6.NextHeader)
		cp.ttl, cp.tos = ip6.HopLimit, ip6.TrafficClass
		cp.v4ckOK = true
		fmt.Fprintf(&id, "6|%s|%s|%d|%d|", cp.key.SrcAddr(), cp.key.DstAddr(), ip6.NextHeader, ip6.Length)
		l4len = int(ip6.Length)
		pseudo = append(append([]byte{}, ip6.SrcIP...), ip6.DstIP...)
		pseudo = append(pseudo, 0, 0, byte(l4len>>8), byte(l4len), 0, 0, 0, uint8(ip6.NextHeader))
	} else {
		t.Fatalf("no IP layer in %x", data)
	}
	var l4contents, payload []byte
	switch l := p.TransportLayer().(type) {
	case *layers.TCP:
		cp.key.SPort, cp.key.DPort = uint16(l.SrcPort), uint16(l.DstPort)
		fmt.Fprintf(&id, "tcp|%d|%d|%d|%d|%d|%x|%d|", l.SrcPort, l.DstPort, l.Seq, l.Ack, l.DataOffset, l.Contents[13], l.Window)
		cp.l4ck = l.Checksum
		l4contents, payload = l.Contents, l.Payload
	case *layers.UDP:
		cp.key.SPort, cp.key.DPort = uint16(l.SrcPort), uint16(l.DstPort)
		fmt.Fprintf(&id, "udp|%d|%d|%d|", l.SrcPort, l.DstPort, l.Length)
		cp.l4ck = l.Checksum
		l4contents, payload = l.Contents, l.Payload
	default:
		if ic, ok := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok {
			cp.key.SPort, cp.key.DPort = uint16(ic.TypeCode), ic.Id
			fmt.Fprintf(&id, "icmp|%d|%d|%d|", ic.TypeCode, ic.Id, ic.Seq)
			cp.l4ck = ic.Checksum
			l4contents, payload = ic.Contents, ic.Payload
			pseudo = nil
		} else if ic6, ok := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6); ok {
			cp.key.SPort = uint16(ic6.TypeCode)
			cp.l4ck = ic6.Checksum
			// gopacket leaves the echo id/seq in the ICMPv6 payload.
			pl := ic6.Payload
			cp.key.DPort = binary.BigEndian.Uint16(pl[0:2])
			fmt.Fprintf(&id, "icmp6|%d|%x|", ic6.TypeCode, pl[0:4])
			l4contents, payload = append(slices.Clone(ic6.Contents), pl[:4]...), pl[4:]
		} else {
			t.Fatalf("no transport layer in %x", data)
		}
	}
	n := min(32, len(payload))
	fmt.Fprintf(&id, "%x", payload[:n])
	cp.id = id.String()
	if len(payload) >= 8 {
		cp.counter = binary.BigEndian.Uint64(payload)
		cp.hasCtr = true
	}
	if cp.full {
		all := append(append(append([]byte{}, pseudo...), l4contents...), payload...)
		cp.l4ckOK = testSum(all) == 0xffff
	}
	return cp
}

type ivKey struct {
	iv  int64
	key capture.FlowKey
}

func genFiles(t *testing.T, sc Scenario, dir string, onPkt func(*PacketTruth)) (Outputs, Summary) {
	t.Helper()
	out := Outputs{
		SenderPcap:   filepath.Join(dir, "a.pcap"),
		ReceiverPcap: filepath.Join(dir, "b.pcap"),
		Truth:        filepath.Join(dir, "truth.jsonl"),
		OnPacket:     onPkt,
	}
	sum, err := Generate(context.Background(), sc, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out, sum
}

func TestDeterminism(t *testing.T) {
	sc := DefaultScenario()
	sc.Duration = 2 * time.Second
	sc.Flows = 50
	sc.RatePPS = 2000
	d1, d2, d3 := t.TempDir(), t.TempDir(), t.TempDir()
	o1, _ := genFiles(t, sc, d1, nil)
	o2, _ := genFiles(t, sc, d2, nil)
	sc.Seed++
	o3, _ := genFiles(t, sc, d3, nil)
	for _, p := range [][3]string{
		{o1.SenderPcap, o2.SenderPcap, o3.SenderPcap},
		{o1.ReceiverPcap, o2.ReceiverPcap, o3.ReceiverPcap},
		{o1.Truth, o2.Truth, o3.Truth},
	} {
		a, _ := os.ReadFile(p[0])
		b, _ := os.ReadFile(p[1])
		c, _ := os.ReadFile(p[2])
		if len(a) < 100 {
			t.Fatalf("%s: only %d bytes", p[0], len(a))
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs with the same seed", filepath.Base(p[0]))
		}
		if bytes.Equal(a, c) {
			t.Errorf("%s identical for different seeds", filepath.Base(p[0]))
		}
	}
}

// TestTruthMatchesCaptures reads both captures back, joins them by an
// identity computed from the invariant fields, and recomputes every truth
// record from the join.
func TestTruthMatchesCaptures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Scenario)
	}{
		{"demo-pcap", func(*Scenario) {}},
		{"pcapng-fullsnap-pop-priority", func(sc *Scenario) {
			sc.Format = "pcapng"
			sc.SnapLen = 0
			sc.Headers.VLAN = VLANPop
			sc.Duration = 2 * time.Second
			sc.RatePPS = 3000
			sc.Classes = append(sc.Classes, Class{Name: "prio", Weight: 0.5,
				Delay: DelayModel{Kind: DelayPriority, HighFraction: 0.3, Queue: 3 * time.Millisecond, Period: 700 * time.Millisecond,
					High: &DelayModel{Kind: DelayUniform, Min: 100 * time.Microsecond, Max: 200 * time.Microsecond},
					Low:  &DelayModel{Kind: DelayConstant, Value: 400 * time.Microsecond}},
				Loss: LossModel{Kind: LossUniform, P: 0.01}})
		}},
		{"random-headers", func(sc *Scenario) {
			sc.Seed = 7
			sc.Headers.Random = true
			sc.Duration = 2 * time.Second
			sc.RatePPS = 2000
			sc.Interval = 300 * time.Millisecond
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := DefaultScenario()
			tc.mutate(&sc)
			fate := map[uint64]PacketTruth{}
			out, sum := genFiles(t, sc, t.TempDir(), func(p *PacketTruth) { fate[p.Counter] = *p })
			A := readCapture(t, out.SenderPcap)
			B := readCapture(t, out.ReceiverPcap)
			if int64(len(A)) != sum.Packets || int64(len(B)) != sum.Received || sum.Packets != sum.Received+sum.Lost {
				t.Fatalf("counts: sender %d (summary %d), receiver %d (summary %d), lost %d", len(A), sum.Packets, len(B), sum.Received, sum.Lost)
			}
			if sum.Lost == 0 || sum.Reordered == 0 {
				t.Errorf("scenario should lose (%d) and reorder (%d) packets", sum.Lost, sum.Reordered)
			}
			sent, truthCalc := checkSenderCapture(t, sc, A)
			delays, hc := checkReceiverCapture(t, sc, A, B, sent, fate)
			// Exactly the non-lost packets arrived.
			var lostByFate int
			for _, f := range fate {
				if f.Lost {
					lostByFate++
				}
			}
			if int64(lostByFate) != sum.Lost || len(fate) != len(A) {
				t.Fatalf("callback: %d packets, %d lost; summary %d lost", len(fate), lostByFate, sum.Lost)
			}
			checkHeaderChanges(t, sum.Headers, hc, len(B))
			checkTruthFile(t, out.Truth, sum, int64(sc.Interval), truthCalc, delays)
		})
	}
}

// checkSenderCapture checks the sender capture's order, identities,
// checksums and times, and returns each packet's index by identity and the
// packets sent per interval and flow.
func checkSenderCapture(t *testing.T, sc Scenario, A []capPkt) (map[string]int, map[ivKey]*acc) {
	t.Helper()
	sent := make(map[string]int, len(A))
	truthCalc := map[ivKey]*acc{}
	ivNS := int64(sc.Interval)
	for i, p := range A {
		if i > 0 && p.ts < A[i-1].ts {
			t.Fatalf("sender capture not sorted by time at %d", i)
		}
		if _, dup := sent[p.id]; dup {
			t.Fatalf("two sender packets share the invariant identity %s", p.id)
		}
		if !p.v4ckOK {
			t.Fatalf("sender IPv4 header checksum wrong")
		}
		if p.ts < sc.StartNS || p.ts >= sc.StartNS+int64(sc.Duration) {
			t.Fatalf("send time %d outside the trace", p.ts)
		}
		sent[p.id] = i
		k := ivKey{p.ts / ivNS, p.key}
		a := truthCalc[k]
		if a == nil {
			a = &acc{}
			truthCalc[k] = a
		}
		a.sent++
	}
	return sent, truthCalc
}

// headerCounts counts the receiver packets whose headers changed, by change.
type headerCounts struct {
	ttlDec, macDiff, vlanDiff, ce, dscp, l4diff, v6 int
}

// checkReceiverCapture checks every receiver packet against its sender
// packet and the callback's fate, and returns the delays per interval and
// flow and the header changes seen.
func checkReceiverCapture(t *testing.T, sc Scenario, A, B []capPkt, sent map[string]int, fate map[uint64]PacketTruth) (map[ivKey][]float64, headerCounts) {
	t.Helper()
	ivNS := int64(sc.Interval)
	delays := map[ivKey][]float64{}
	seen := map[string]bool{}
	var hc headerCounts
	for i, p := range B {
		if i > 0 && p.ts < B[i-1].ts {
			t.Fatalf("receiver capture not sorted by time at %d", i)
		}
		j, ok := sent[p.id]
		if !ok {
			t.Fatalf("receiver packet %s never sent", p.id)
		}
		if seen[p.id] {
			t.Fatalf("receiver packet %s twice", p.id)
		}
		seen[p.id] = true
		s := A[j]
		d := p.ts - s.ts
		if d <= 0 || d >= int64(sc.MaxDelay) {
			t.Fatalf("delay %d ns outside (0, %v)", d, sc.MaxDelay)
		}
		if s.hasCtr {
			f, ok := fate[s.counter]
			if !ok || f.Lost || f.RecvNS != p.ts || f.SendNS != s.ts {
				t.Fatalf("packet %d: callback says %+v, captures say send %d recv %d", s.counter, f, s.ts, p.ts)
			}
		}
		if !p.v4ckOK {
			t.Fatalf("receiver IPv4 header checksum wrong (not recomputed)")
		}
		if p.full && !p.l4ckOK {
			t.Fatalf("receiver L4 checksum wrong: %s", p.id)
		}
		if p.wire-s.wire != vlanLen(p.vlan)-vlanLen(s.vlan) {
			t.Fatalf("wire length %d vs %d does not match the VLAN change", p.wire, s.wire)
		}
		if p.ttl == s.ttl-1 {
			hc.ttlDec++
		} else if p.ttl != s.ttl {
			t.Fatalf("TTL %d -> %d", s.ttl, p.ttl)
		}
		if p.macs != s.macs {
			hc.macDiff++
		}
		if p.vlan != s.vlan {
			hc.vlanDiff++
		}
		if p.tos&3 == 3 && s.tos&3 == 2 {
			hc.ce++
		}
		if p.tos>>2 != s.tos>>2 {
			hc.dscp++
		}
		if p.l4ck != s.l4ck {
			hc.l4diff++
		}
		if p.key.V6 {
			hc.v6++
		}
		k := ivKey{s.ts / ivNS, s.key}
		delays[k] = append(delays[k], float64(d))
	}
	return delays, hc
}

// checkHeaderChanges: each header change happened if and only if the
// scenario enabled it; n receiver packets.
func checkHeaderChanges(t *testing.T, h HeaderChanges, hc headerCounts, n int) {
	t.Helper()
	check := func(name string, got int, on bool) {
		if on && got == 0 {
			t.Errorf("%s enabled but never happened", name)
		}
		if !on && got != 0 {
			t.Errorf("%s disabled but happened %d times", name, got)
		}
	}
	check("ttl_decrement", hc.ttlDec, h.TTLDecrement)
	if h.TTLDecrement && hc.ttlDec != n {
		t.Errorf("TTL decremented on %d of %d packets", hc.ttlDec, n)
	}
	check("mac_rewrite", hc.macDiff, h.MACRewrite)
	check("vlan", hc.vlanDiff, h.VLAN != VLANNone)
	check("ecn_ce", hc.ce, h.ECNCE > 0)
	check("dscp_remark", hc.dscp, h.DSCPRemark > 0)
	check("l4_checksum_offload", hc.l4diff, h.L4ChecksumOffload > 0)
	if hc.v6 == 0 || hc.v6 == n {
		t.Errorf("IPv4/IPv6 mix missing: %d of %d IPv6", hc.v6, n)
	}
}

// checkTruthFile checks every truth record against what the captures give:
// the packets sent per interval and flow and the delays of those received.
func checkTruthFile(t *testing.T, path string, sum Summary, ivNS int64, truthCalc map[ivKey]*acc, delays map[ivKey][]float64) {
	t.Helper()
	recs, err := truth.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(truthCalc) || len(recs) != sum.TruthRecords {
		t.Fatalf("truth has %d records, captures give %d (summary %d)", len(recs), len(truthCalc), sum.TruthRecords)
	}
	for _, r := range recs {
		key, err := r.Key()
		if err != nil {
			t.Fatal(err)
		}
		k := ivKey{r.Interval, key}
		a := truthCalc[k]
		if a == nil {
			t.Fatalf("truth record %+v not in the captures", k)
		}
		ds := delays[k]
		if r.Sent != a.sent || r.Received != int64(len(ds)) || r.Lost != a.sent-int64(len(ds)) {
			t.Fatalf("%+v: truth sent/recv/lost %d/%d/%d, captures %d/%d", k, r.Sent, r.Received, r.Lost, a.sent, len(ds))
		}
		if r.StartNS != r.Interval*ivNS {
			t.Fatalf("start_ns %d for interval %d", r.StartNS, r.Interval)
		}
		if len(ds) == 0 {
			if r.DelayNS != nil || r.StddevNS != nil {
				t.Fatalf("%+v: delay given with nothing received", k)
			}
			continue
		}
		var s float64
		for _, d := range ds {
			s += d
		}
		mean := s / float64(len(ds))
		var v float64
		for _, d := range ds {
			v += (d - mean) * (d - mean)
		}
		std := math.Sqrt(v / float64(len(ds)))
		if r.DelayNS == nil || math.Abs(*r.DelayNS-mean) > 1e-9*mean+1e-6 {
			t.Fatalf("%v: truth mean %s, captures %v", k, fp(r.DelayNS), mean)
		}
		if r.StddevNS == nil || math.Abs(*r.StddevNS-std) > 1e-6*std+1e-3 {
			t.Fatalf("%v: truth stddev %s, captures %v", k, fp(r.StddevNS), std)
		}
	}
}

func vlanLen(v int) int {
	if v < 0 {
		return 0
	}
	return 4
}

func TestFlowSizesHitRate(t *testing.T) {
	for _, tc := range []struct {
		flows int
		rate  float64
		dur   time.Duration
	}{{5000, 100000, 10 * time.Second}, {200, 4000, 5 * time.Second}, {1000, 1000, time.Second}} {
		sc := DefaultScenario()
		sc.Flows, sc.RatePPS, sc.Duration = tc.flows, tc.rate, tc.dur
		sc.FlowSize.Max = 0
		g, err := newGenerator(sc, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		sizes := make([]int64, 0, len(g.flows))
		for _, f := range g.flows {
			if f.n < 1 {
				t.Fatalf("flow with %d packets", f.n)
			}
			total += f.n
			sizes = append(sizes, f.n)
		}
		target := tc.rate * tc.dur.Seconds()
		if math.Abs(float64(total)-target) > 0.01*target {
			t.Errorf("%d flows: %d packets, target %.0f", tc.flows, total, target)
		}
		slices.Sort(sizes)
		if tc.rate*tc.dur.Seconds() > 10*float64(tc.flows) && sizes[len(sizes)-1] < 20*sizes[len(sizes)/2] {
			t.Errorf("%d flows: not heavy-tailed: median %d, max %d", tc.flows, sizes[len(sizes)/2], sizes[len(sizes)-1])
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Scenario)
		want   string
	}{
		{"ok", func(*Scenario) {}, ""},
		{"duration", func(s *Scenario) { s.Duration = 0 }, "duration"},
		{"flows", func(s *Scenario) { s.Flows = 0 }, "flows"},
		{"rate too low", func(s *Scenario) { s.RatePPS = 1 }, "fewer than flows"},
		{"dist", func(s *Scenario) { s.FlowSize.Dist = "zipf" }, "flow_size.dist"},
		{"fixed empty", func(s *Scenario) { s.FlowSize.Dist = "fixed" }, "non-empty sizes"},
		{"lifetime", func(s *Scenario) { s.Lifetime.Max = time.Millisecond }, "lifetime"},
		{"no classes", func(s *Scenario) { s.Classes = nil }, "at least one class"},
		{"delay kind", func(s *Scenario) { s.Classes[0].Delay = DelayModel{Kind: "gamma"} }, "unknown kind"},
		{"bimodal missing b", func(s *Scenario) { s.Classes[0].Delay.B = nil }, "b is required"},
		{"weibull shape", func(s *Scenario) { s.Classes[0].Delay.A.Shape = 0 }, "shape > 0"},
		{"ecmp no paths", func(s *Scenario) { s.Classes[1].Delay.Paths = nil }, "at least one path"},
		{"loss p", func(s *Scenario) { s.Classes[1].Loss.P = 2 }, "p must be in [0, 1]"},
		{"loss kind", func(s *Scenario) { s.Classes[1].Loss.Kind = "burst" }, "unknown kind"},
		{"vlan", func(s *Scenario) { s.Headers.VLAN = "qinq" }, "vlan"},
		{"snaplen", func(s *Scenario) { s.SnapLen = 60 }, "too short"},
		{"format", func(s *Scenario) { s.Format = "erf" }, "format"},
		{"payload", func(s *Scenario) { s.Traffic.MaxPayload = 9000 }, "max_payload"},
		{"proto weights", func(s *Scenario) { s.Traffic.TCP, s.Traffic.UDP, s.Traffic.ICMP = 0, 0, 0 }, "positive sum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := DefaultScenario()
			// Deep-copy the classes so mutations do not leak between cases.
			sc.Classes = slices.Clone(sc.Classes)
			a := *sc.Classes[0].Delay.A
			sc.Classes[0].Delay.A = &a
			tc.mutate(&sc)
			err := sc.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func fp(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}
