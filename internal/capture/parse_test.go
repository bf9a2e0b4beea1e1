package capture

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/lds-net/lds/internal/match"
)

const tseed = "test-seed"

func basePackets() map[string]pk {
	return map[string]pk{
		"v4-tcp": {src: "192.0.2.1", dst: "198.51.100.7", proto: "tcp", sport: 51000, dport: 443, seq: 1000, ack: 77, window: 512,
			psh: true, id: 0x1234, df: true, ttl: 64, payload: seqBytes(100, 1)},
		"v4-tcp-opts": {src: "192.0.2.1", dst: "198.51.100.7", proto: "tcp", sport: 51000, dport: 443, seq: 5, syn: true,
			window: 65535, tcpOpts: true, ihlOpts: true, id: 9, ttl: 64, payload: seqBytes(10, 50)},
		"v4-udp-small": {src: "10.1.2.3", dst: "10.9.8.7", proto: "udp", sport: 5353, dport: 53, id: 77, ttl: 64, payload: []byte{1, 2, 3}},
		"v4-udp-empty": {src: "10.1.2.3", dst: "10.9.8.7", proto: "udp", sport: 1, dport: 2, id: 78, ttl: 64},
		"v4-icmp-echo": {src: "10.1.2.3", dst: "10.9.8.7", proto: "icmp", icmpType: 8, icmpID: 4242, icmpSeq: 7, id: 5, ttl: 64, payload: seqBytes(56, 0)},
		"v4-icmp-unreach": {src: "10.1.2.3", dst: "10.9.8.7", proto: "icmp", icmpType: 3, icmpCode: 1, id: 6, ttl: 64,
			payload: seqBytes(28, 9)},
		"v4-other": {src: "10.1.2.3", dst: "10.9.8.7", proto: "other", id: 8, ttl: 64, payload: seqBytes(40, 3)},
		"v6-tcp": {v6: true, src: "2001:db8::1", dst: "2001:db8:1::2", proto: "tcp", sport: 40000, dport: 80, seq: 9, ack: 10, window: 100,
			ttl: 64, label: 0x12345, payload: seqBytes(64, 2)},
		"v6-udp": {v6: true, src: "2001:db8::1", dst: "2001:db8:1::2", proto: "udp", sport: 4000, dport: 4001, ttl: 64, payload: seqBytes(20, 7)},
		"v6-icmp-echo": {v6: true, src: "2001:db8::1", dst: "2001:db8:1::2", proto: "icmp", icmpType: 128, icmpID: 99, icmpSeq: 1,
			ttl: 64, payload: seqBytes(40, 0)},
	}
}

// TestSpecLayout checks the parser against the documented byte layout,
// computed from the packet's fields (the wire contract, hash version 2),
// at the default ip_bytes and at bounds that cut the payload short or not.
func TestSpecLayout(t *testing.T) {
	for _, bound := range []int{DefaultIPBytes, 64, MaxIPBytes} {
		for _, n := range []int{0, 8, 32, 1024} {
			specLayout(t, n, bound)
		}
	}
}

func specLayout(t *testing.T, n, bound int) {
	p := testParser(t, func(c *Config) { c.Identity.PayloadBytes, c.Identity.IPBytes = n, bound })
	for name, b := range basePackets() {
		t.Run(fmt.Sprintf("%s/N=%d/ip_bytes=%d", name, n, bound), func(t *testing.T) {
			wantK, wantFH, wantPH := b.specB(t, tseed, n, bound)
			got, r := p.Identify(b.frame(t), 0, layers.LinkTypeEthernet)
			if r != ReasonOK {
				t.Fatalf("skipped: %v", r)
			}
			if got.Key != wantK || got.FlowHash != wantFH || got.PktHash != wantPH {
				t.Errorf("got key %v fh %x ph %x, want key %v fh %x ph %x", got.Key, got.FlowHash, got.PktHash, wantK, wantFH, wantPH)
			}
		})
	}
}

// hops are the changes a packet goes through between two taps; none may
// change its identity.
var hops = []struct {
	name string
	f    func(*pk)
}{
	{"ttl-1", func(p *pk) { p.ttl-- }},
	{"dscp-remark", func(p *pk) { p.tos = 0xb8 | p.tos&3 }},
	{"ecn-ce", func(p *pk) { p.tos |= 3 }},
	{"vlan-push", func(p *pk) { p.vlans = append([]uint16{100}, p.vlans...) }},
	{"vlan-pop", func(p *pk) { p.vlans = nil }},
	{"qinq", func(p *pk) { p.vlans = []uint16{200, 100} }},
	{"mpls", func(p *pk) { p.mpls = []uint32{16001, 24} }},
	{"macs", func(p *pk) { p.srcMAC, p.dstMAC = 0x77, 0x88 }},
	{"l4-checksum", func(p *pk) { p.csumXor = 0x5a5a }},
	{"flow-label", func(p *pk) { p.label ^= 0xabcde }},
	{"eth-padding", func(p *pk) { p.padTo, p.padByte = 60, 0xee }},
	{"all", func(p *pk) {
		p.ttl -= 3
		p.tos = 0x2b
		p.vlans = []uint16{7, 8}
		p.srcMAC, p.dstMAC = 1, 2
		p.csumXor = 1
		p.label = 1
		p.padTo, p.padByte = 64, 0xff
	}},
}

func withVLAN(p pk) pk { p.vlans = []uint16{100}; return p }

func TestHopInvariance(t *testing.T) {
	bases := basePackets()
	bases["v4-tcp-vlan"] = withVLAN(bases["v4-tcp"])
	first, second := fragPair(bases["v4-tcp"])
	bases["v4-frag-first"], bases["v4-frag-second"] = first, second
	bases["v6-ext"] = v6Ext(bases["v6-tcp"], 0x11)
	v6f := v6Frag(bases["v6-udp"], 0, true, 0xdeadbeef)
	bases["v6-frag-first"] = v6f
	bases["v6-frag-second"] = v6Frag(bases["v6-udp"], 3, false, 0xdeadbeef)
	// v6-ext's headers (40 + 24 + 20) exceed the default ip_bytes.
	p := testParser(t, func(c *Config) { c.Identity.IPBytes = 128 })
	for name, b := range bases {
		base, r := p.Identify(b.frame(t), 0, layers.LinkTypeEthernet)
		if r != ReasonOK {
			t.Fatalf("%s: base skipped: %v", name, r)
		}
		for _, h := range hops {
			t.Run(name+"/"+h.name, func(t *testing.T) {
				hb := b
				hb.vlans = append([]uint16(nil), b.vlans...)
				h.f(&hb)
				got, r := p.Identify(hb.frame(t), 0, layers.LinkTypeEthernet)
				if r != ReasonOK {
					t.Fatalf("skipped: %v", r)
				}
				if got.Key != base.Key || got.FlowHash != base.FlowHash || got.PktHash != base.PktHash {
					t.Errorf("identity changed: %v/%x/%x -> %v/%x/%x", base.Key, base.FlowHash, base.PktHash, got.Key, got.FlowHash, got.PktHash)
				}
			})
		}
		// The same IP packet on other link types.
		ipb := b.ipPacket(t)
		sll := append([]byte{0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}, 0, 0)
		sll2 := []byte{0, 0, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}
		et := uint16(etIPv4)
		if b.v6 {
			et = etIPv6
		}
		binary.BigEndian.PutUint16(sll[14:], et)
		binary.BigEndian.PutUint16(sll2[0:], et)
		null := []byte{2, 0, 0, 0}
		if b.v6 {
			null = []byte{10, 0, 0, 0}
		}
		for _, lt := range []struct {
			lt   layers.LinkType
			data []byte
		}{
			{layers.LinkTypeRaw, ipb},
			{layers.LinkTypeIPv4, ipb},
			{layers.LinkTypeLinuxSLL, append(sll, ipb...)},
			{layers.LinkTypeLinuxSLL2, append(sll2, ipb...)},
			{layers.LinkTypeNull, append(null, ipb...)},
		} {
			got, r := p.Identify(lt.data, 0, lt.lt)
			if r != ReasonOK || got.PktHash != base.PktHash || got.Key != base.Key {
				t.Errorf("%s on link %v: %v %v, want %v", name, lt.lt, r, got.Key, base.Key)
			}
		}
	}
}

// fragPair splits a TCP packet into two IPv4 fragments at 32 bytes.
func fragPair(b pk) (pk, pk) {
	// First fragment: TCP header (20) + 12 payload bytes, MF set.
	first := b
	first.mf = true
	first.payload = b.payload[:12]
	second := b
	second.fragOff = 4 // 32 bytes
	second.payload = b.payload[12:]
	return first, second
}

// v6Ext adds hop-by-hop and destination options headers (opt is an option
// byte that may change en route).
func v6Ext(b pk, opt byte) pk {
	b.v6ext = []byte{
		0, 0, 1, 4, opt, opt, opt, opt, // hop-by-hop: PadN-style option, 8 bytes
		0, 1, 1, 12, opt, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // destination options, 16 bytes
	}
	b.v6extNHs = []uint8{0, 60}
	return b
}

func v6Frag(b pk, off uint16, more bool, id uint32) pk {
	fw := off << 3
	if more {
		fw |= 1
	}
	h := []byte{0, 0, byte(fw >> 8), byte(fw), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[4:], id)
	b.v6ext = h
	b.v6extNHs = []uint8{44}
	b.noL4 = off != 0
	return b
}

func TestV6ExtensionHeaders(t *testing.T) {
	p := testParser(t, func(c *Config) { c.Identity.IPBytes = 128 })
	b := basePackets()["v6-tcp"]
	wantK, _, _ := b.spec(t, tseed, 32)
	e1, _ := p.Identify(v6Ext(b, 0x11).frame(t), 0, layers.LinkTypeEthernet)
	e2, _ := p.Identify(v6Ext(b, 0x22).frame(t), 0, layers.LinkTypeEthernet)
	plain, _ := p.Identify(b.frame(t), 0, layers.LinkTypeEthernet)
	if e1.Key != wantK {
		t.Errorf("key through extension headers %v, want %v", e1.Key, wantK)
	}
	if e1.PktHash != e2.PktHash {
		t.Error("hop-by-hop option contents changed the hash; extension headers are not hashed")
	}
	if e1.PktHash == plain.PktHash {
		t.Error("extension headers change the payload length, which is hashed; hashes should differ")
	}
}

func TestFragments(t *testing.T) {
	p := testParser(t, nil)
	b := basePackets()["v4-tcp"]
	first, second := fragPair(b)
	whole, _ := p.Identify(b.frame(t), 0, layers.LinkTypeEthernet)
	var f1, f2 Packet
	if !p.Parse(first.frame(t), 0, 1, layers.LinkTypeEthernet, &f1) || !p.Parse(second.frame(t), 0, 2, layers.LinkTypeEthernet, &f2) {
		t.Fatalf("fragments skipped: %+v", p.Counters())
	}
	wantFirst, _, wantFirstPH := first.spec(t, tseed, 32)
	if f1.Key != wantFirst || f1.PktHash != wantFirstPH {
		t.Errorf("first fragment: %v %x, want %v %x", f1.Key, f1.PktHash, wantFirst, wantFirstPH)
	}
	// Non-first fragment: ports unknown (0), protocol kept; identity from
	// the IP fields and the first N bytes of the fragment's data.
	wantSecond, _, wantSecondPH := second.spec(t, tseed, 32)
	if wantSecond.SPort != 0 || f2.Key != wantSecond || f2.PktHash != wantSecondPH {
		t.Errorf("second fragment: %v %x, want %v %x", f2.Key, f2.PktHash, wantSecond, wantSecondPH)
	}
	if f1.PktHash == whole.PktHash || f1.PktHash == f2.PktHash {
		t.Error("fragments must hash apart from each other and from the whole packet")
	}
	if c := p.Counters(); c.Fragments != 1 || c.Parsed != 2 {
		t.Errorf("counters %+v, want 2 parsed of which 1 non-first fragment", c)
	}
	// IPv6: the fragment header's offset, M flag and identification are hashed.
	u := basePackets()["v6-udp"]
	a, _ := p.Identify(v6Frag(u, 3, false, 1).frame(t), 0, layers.LinkTypeEthernet)
	bb, _ := p.Identify(v6Frag(u, 3, false, 2).frame(t), 0, layers.LinkTypeEthernet)
	c, _ := p.Identify(v6Frag(u, 4, false, 1).frame(t), 0, layers.LinkTypeEthernet)
	fst, _ := p.Identify(v6Frag(u, 0, true, 1).frame(t), 0, layers.LinkTypeEthernet)
	if a.PktHash == bb.PktHash || a.PktHash == c.PktHash {
		t.Error("IPv6 fragments differing in identification or offset must hash apart")
	}
	if a.Key.SPort != 0 || a.Key.Proto != 17 {
		t.Errorf("non-first IPv6 fragment key %v, want proto 17 and no ports", a.Key)
	}
	if fst.Key.SPort != u.sport || fst.Key.DPort != u.dport {
		t.Errorf("first IPv6 fragment key %v, want ports %d>%d", fst.Key, u.sport, u.dport)
	}
}

func TestInvariantFieldsDiffer(t *testing.T) {
	const n = 32
	p := testParser(t, func(c *Config) { c.Identity.PayloadBytes = n })
	base := basePackets()["v4-tcp"]
	b6 := basePackets()["v6-udp"]
	muts := []struct {
		name string
		b    pk
		f    func(*pk)
	}{
		{"base4", base, func(*pk) {}},
		{"src", base, func(p *pk) { p.src = "192.0.2.2" }},
		{"dst", base, func(p *pk) { p.dst = "198.51.100.8" }},
		{"sport", base, func(p *pk) { p.sport++ }},
		{"dport", base, func(p *pk) { p.dport++ }},
		{"seq", base, func(p *pk) { p.seq++ }},
		{"ack", base, func(p *pk) { p.ack++ }},
		{"window", base, func(p *pk) { p.window++ }},
		{"flags", base, func(p *pk) { p.psh = false }},
		{"tcp-doff", base, func(p *pk) { p.tcpOpts = true }},
		{"ip-id", base, func(p *pk) { p.id++ }},
		{"df", base, func(p *pk) { p.df = false }},
		{"proto", base, func(p *pk) { p.proto = "udp" }},
		{"payload[0]", base, func(p *pk) { p.payload = append([]byte{0xff}, p.payload[1:]...) }},
		{"payload[N-1]", base, func(p *pk) { p.payload = append([]byte(nil), p.payload...); p.payload[n-1] ^= 0xff }},
		{"length", base, func(p *pk) { p.payload = append(append([]byte(nil), p.payload...), 0) }},
		{"base6", b6, func(*pk) {}},
		{"v6-src", b6, func(p *pk) { p.src = "2001:db8::3" }},
		{"v6-dst", b6, func(p *pk) { p.dst = "2001:db8::4" }},
		{"v6-len", b6, func(p *pk) { p.payload = p.payload[1:] }},
		{"v6-nh", b6, func(p *pk) { p.proto = "tcp" }},
		{"v6-payload", b6, func(p *pk) { p.payload = append([]byte{0}, p.payload[1:]...) }},
	}
	seen := map[uint64]string{}
	for _, m := range muts {
		b := m.b
		m.f(&b)
		got, r := p.Identify(b.frame(t), 0, layers.LinkTypeEthernet)
		if r != ReasonOK {
			t.Fatalf("%s: %v", m.name, r)
		}
		if prev, dup := seen[got.PktHash]; dup {
			t.Errorf("%s hashes like %s", m.name, prev)
		}
		seen[got.PktHash] = m.name
	}
	// A payload byte past N is not hashed: exactly N bytes count.
	b := base
	b.payload = append([]byte(nil), base.payload...)
	b.payload[n] ^= 0xff
	x, _ := p.Identify(base.frame(t), 0, layers.LinkTypeEthernet)
	y, _ := p.Identify(b.frame(t), 0, layers.LinkTypeEthernet)
	if x.PktHash != y.PktHash {
		t.Error("payload byte N (0-based) changed the hash; only the first N bytes are hashed")
	}
}

// TestSnapLength: the hash never depends on how much was captured, only on
// the first min(N, payload) bytes; less than that is counted, not guessed.
func TestSnapLength(t *testing.T) {
	p := testParser(t, nil)
	b := basePackets()["v4-tcp"] // 14 + 20 + 20 + 100 bytes
	full := b.frame(t)
	want, _ := p.Identify(full, 0, layers.LinkTypeEthernet)
	for _, snap := range []int{14 + 40 + 32, 14 + 40 + 33, 100, len(full)} {
		var got Packet
		if !p.Parse(full[:snap], len(full), 0, layers.LinkTypeEthernet, &got) || got.PktHash != want.PktHash {
			t.Errorf("snap %d: identity differs or skipped (%+v)", snap, p.Counters())
		}
		if got.WireLen != uint32(len(full)) {
			t.Errorf("snap %d: wire length %d, want %d", snap, got.WireLen, len(full))
		}
	}
	var got Packet
	if p.Parse(full[:14+40+31], len(full), 0, layers.LinkTypeEthernet, &got) {
		t.Error("a capture one byte short of N payload bytes must be skipped")
	}
	if c := p.Counters(); c.ShortSnap != 1 {
		t.Errorf("short_snap = %d, want 1", c.ShortSnap)
	}
}

func TestSkipReasons(t *testing.T) {
	b := basePackets()["v4-tcp"]
	good := b.frame(t)
	mod := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	arp := append(make([]byte, 12), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	cases := []struct {
		name string
		data []byte
		link layers.LinkType
		want Reason
		wire int // 0: len(data)
	}{
		{"arp", arp, layers.LinkTypeEthernet, ReasonNonIP, 0},
		{"lldp-in-vlan", mod(func(d []byte) []byte {
			return append(append(d[:12:12], 0x81, 0, 0, 5, 0x88, 0xcc), make([]byte, 40)...)
		}), layers.LinkTypeEthernet, ReasonNonIP, 0},
		{"short-eth", good[:10], layers.LinkTypeEthernet, ReasonTruncated, 0},
		{"short-ip", good[:14+12], layers.LinkTypeEthernet, ReasonTruncated, len(good)},
		{"short-tcp", good[:14+20+10], layers.LinkTypeEthernet, ReasonTruncated, len(good)},
		{"ihl<5", mod(func(d []byte) []byte { d[14] = 0x44; return d }), layers.LinkTypeEthernet, ReasonMalformed, 0},
		{"ip-version", mod(func(d []byte) []byte { d[14] = 0x55; return d }), layers.LinkTypeEthernet, ReasonMalformed, 0},
		{"totlen>frame", mod(func(d []byte) []byte { binary.BigEndian.PutUint16(d[16:], 1500); return d }), layers.LinkTypeEthernet, ReasonMalformed, 0},
		{"totlen<ihl", mod(func(d []byte) []byte { binary.BigEndian.PutUint16(d[16:], 10); return d }), layers.LinkTypeEthernet, ReasonMalformed, 0},
		{"tcp-doff<5", mod(func(d []byte) []byte { d[14+20+12] = 0x40; return d }), layers.LinkTypeEthernet, ReasonMalformed, 0},
		{"tcp-doff>segment", mod(func(d []byte) []byte {
			binary.BigEndian.PutUint16(d[16:], 20+24)
			d[14+20+12] = 0xf0
			return d[:14+44]
		}), layers.LinkTypeEthernet, ReasonMalformed, 0},
		{"payload-cut", good[:14+40+5], layers.LinkTypeEthernet, ReasonShortSnap, len(good)},
		{"link", good, layers.LinkTypeFDDI, ReasonUnsupportedLink, 0},
		{"mpls-cut", append(good[:12:12], 0x88, 0x47, 0, 0), layers.LinkTypeEthernet, ReasonTruncated, 0},
		{"raw-not-ip", []byte{0x10, 1, 2, 3}, layers.LinkTypeRaw, ReasonNonIP, 0},
	}
	p := testParser(t, nil)
	want := map[Reason]uint64{}
	for _, c := range cases {
		var out Packet
		wl := len(c.data)
		if c.wire != 0 {
			wl = c.wire
		}
		if _, r := p.Identify(c.data, wl, c.link); r != c.want {
			t.Errorf("%s: reason %v, want %v", c.name, r, c.want)
		}
		if p.Parse(c.data, wl, 0, c.link, &out) {
			t.Errorf("%s: parsed", c.name)
		}
		want[c.want]++
	}
	// Not selected: a select rule for another port.
	ps := testParser(t, func(c *Config) { c.Select = []match.Rule{{DPort: []string{"80"}}} })
	var out Packet
	if ps.Parse(good, len(good), 0, layers.LinkTypeEthernet, &out) || ps.Counters().NotSelected != 1 {
		t.Errorf("select: %+v", ps.Counters())
	}
	got := p.Counters()
	if got.NonIP != want[ReasonNonIP] || got.Truncated != want[ReasonTruncated] || got.Malformed != want[ReasonMalformed] ||
		got.ShortSnap != want[ReasonShortSnap] || got.UnsupportedLink != want[ReasonUnsupportedLink] || got.Parsed != 0 {
		t.Errorf("counters %+v, want %v", got, want)
	}
}

func TestAggregation(t *testing.T) {
	p := testParser(t, func(c *Config) {
		c.Identity.FlowKey.SrcPrefixV4 = 24
		c.Identity.FlowKey.DstPrefixV6 = 48
		c.Identity.FlowKey.Ports = false
	})
	a := basePackets()["v4-tcp"]
	b := a
	b.src, b.sport, b.dport = "192.0.2.200", 1, 2
	c := a
	c.src = "192.0.3.1"
	pa, _ := p.Identify(a.frame(t), 0, layers.LinkTypeEthernet)
	pb, _ := p.Identify(b.frame(t), 0, layers.LinkTypeEthernet)
	pc, _ := p.Identify(c.frame(t), 0, layers.LinkTypeEthernet)
	if pa.Key != pb.Key || pa.FlowHash != pb.FlowHash {
		t.Errorf("same /24 and ports off: keys %v and %v differ", pa.Key, pb.Key)
	}
	if pa.PktHash == pb.PktHash {
		t.Error("aggregation must not touch the packet hash")
	}
	if pa.Key == pc.Key || pa.FlowHash == pc.FlowHash {
		t.Error("different /24 must give different keys")
	}
	if got := pa.Key.SrcAddr().String(); got != "192.0.2.0" || pa.Key.SPort != 0 {
		t.Errorf("aggregated key %v", pa.Key)
	}
	v := basePackets()["v6-tcp"]
	pv, _ := p.Identify(v.frame(t), 0, layers.LinkTypeEthernet)
	if got := pv.Key.DstAddr().String(); got != "2001:db8:1::" {
		t.Errorf("v6 /48 dst %s", got)
	}
	pp := testParser(t, func(c *Config) { c.Identity.FlowKey.Proto = false })
	x, _ := pp.Identify(a.frame(t), 0, layers.LinkTypeEthernet)
	if x.Key.Proto != 0 || x.Key.DPort != 443 {
		t.Errorf("proto off: %v", x.Key)
	}
}

func TestWeightsAndClasses(t *testing.T) {
	p := testParser(t, func(c *Config) {
		c.Weights = []WeightRule{{Rule: match.Rule{DPort: []string{"443"}}, Weight: 8}, {Rule: match.Rule{Proto: []int{17}}, Weight: 2}}
		c.Classes = []match.Rule{{Name: "web", DPort: []string{"80", "443"}}, {Name: "v6", Src: []string{"2001:db8::/32"}}}
	})
	cases := []struct {
		name   string
		weight uint32
		class  uint16
	}{{"v4-tcp", 8, 1}, {"v4-udp-small", 2, 0}, {"v6-tcp", 1, 1}, {"v6-udp", 2, 2}, {"v4-icmp-echo", 1, 0}}
	for _, c := range cases {
		var out Packet
		if !p.Parse(basePackets()[c.name].frame(t), 0, 0, layers.LinkTypeEthernet, &out) {
			t.Fatal(c.name)
		}
		if out.Weight != c.weight || out.Class != c.class {
			t.Errorf("%s: weight %d class %d, want %d %d", c.name, out.Weight, out.Class, c.weight, c.class)
		}
	}
}

func TestParseAllocatesNothing(t *testing.T) {
	p := testParser(t, func(c *Config) {
		c.Select = []match.Rule{{Src: []string{"0.0.0.0/0", "::/0"}}}
		c.Weights = []WeightRule{{Rule: match.Rule{DPort: []string{"443"}}, Weight: 3}}
		c.Classes = []match.Rule{{Name: "a", Proto: []int{6}}}
	})
	frames := [][]byte{basePackets()["v4-tcp"].frame(t), basePackets()["v6-tcp"].frame(t), withVLAN(basePackets()["v4-tcp"]).frame(t)}
	var out Packet
	allocs := testing.AllocsPerRun(200, func() {
		for _, f := range frames {
			p.Parse(f, len(f), 1, layers.LinkTypeEthernet, &out)
		}
	})
	if allocs != 0 {
		t.Errorf("Parse allocates %.1f per run, want 0", allocs)
	}
}

// TestSnaplenInvariance: a packet cut to its link header + ip_bytes (a
// header-only capture: tcpdump -s 96 on Ethernet at the default) has the
// identity it has whole, and a packet whose headers alone exceed
// ip_bytes is left out as long_headers however much of it was captured.
func TestSnaplenInvariance(t *testing.T) {
	pkts := randomPackets(3000, 21)
	bases := basePackets()
	for _, name := range []string{"v4-tcp", "v6-tcp", "v6-udp", "v4-icmp-echo"} {
		pkts = append(pkts, bases[name], withVLAN(bases[name]))
		qinq := bases[name]
		qinq.vlans = []uint16{7, 8}
		pkts = append(pkts, qinq, v6Ext(bases["v6-tcp"], 3))
	}
	for i := range pkts {
		if i%4 == 1 {
			pkts[i].tcpOpts = true
		}
	}
	for _, bound := range []int{DefaultIPBytes, 114, MinIPBytes} {
		for _, n := range []int{32, 1024} {
			p := testParser(t, func(c *Config) { c.Identity.PayloadBytes, c.Identity.IPBytes = n, bound })
			long := 0
			for i, b := range pkts {
				frame := b.frame(t)
				whole, rw := p.Identify(frame, 0, layers.LinkTypeEthernet)
				link := 14 + 4*len(b.vlans)
				for _, extra := range []int{0, 1, 14} {
					snap := min(len(frame), link+bound+extra)
					cut, rc := p.Identify(frame[:snap], len(frame), layers.LinkTypeEthernet)
					if rc != rw || cut != whole {
						t.Fatalf("ip_bytes %d N %d packet %d (%s, %d tags) cut to %d of %d bytes: %v %x, whole: %v %x",
							bound, n, i, b.proto, len(b.vlans), snap, len(frame), rc, cut.PktHash, rw, whole.PktHash)
					}
				}
				switch rw {
				case ReasonOK:
				case ReasonLongHeaders:
					long++
				default:
					t.Fatalf("packet %d skipped whole: %v", i, rw)
				}
			}
			if bound == DefaultIPBytes && long == 0 {
				t.Error("no packet with headers over ip_bytes: the long_headers rule went untested")
			}
			t.Logf("ip_bytes %d N %d: %d of %d packets left out as long_headers", bound, n, long, len(pkts))
		}
	}
}

// TestOutageTracker: an interval is touched when the link was down when
// it or the one before it was emitted, or went down in between.
func TestOutageTracker(t *testing.T) {
	up := func(downs uint64) DropStats { return DropStats{LinkDowns: downs, Link: LinkUp} }
	down := func(downs uint64) DropStats { return DropStats{LinkDowns: downs, Link: LinkDown} }
	for _, tc := range []struct {
		name string
		seq  []DropStats
		want []bool
	}{
		{"file source", []DropStats{{}, {}}, []bool{false, false}},
		{"always up", []DropStats{up(0), up(0), up(0)}, []bool{false, false, false}},
		{"down at start", []DropStats{down(1), down(1), up(1), up(1)}, []bool{true, true, true, false}},
		{"flap inside one interval", []DropStats{up(0), up(1), up(1)}, []bool{false, true, false}},
		{"down across intervals", []DropStats{up(0), down(1), down(1), up(1), up(1)}, []bool{false, true, true, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o OutageTracker
			for i, d := range tc.seq {
				if got := o.Touched(d); got != tc.want[i] {
					t.Errorf("interval %d (%+v): touched %v, want %v", i, d, got, tc.want[i])
				}
			}
		})
	}
}
