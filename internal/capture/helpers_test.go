package capture

import (
	"crypto/sha256"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/zeebo/xxh3"
)

// pk describes one test packet by its fields; frame() lays it out with
// gopacket's serializer, spec() computes its identity from the fields alone
// (the documented hash layout), independently of the parser.
type pk struct {
	v6       bool
	src, dst string
	proto    string // tcp, udp, icmp, other
	sport    uint16
	dport    uint16
	seq, ack uint32
	window   uint16
	syn, psh bool
	tcpOpts  bool // add a 12-byte option block (MSS, NOP, window scale, ...)
	icmpType uint8
	icmpCode uint8
	icmpID   uint16
	icmpSeq  uint16
	payload  []byte

	// IPv4 header
	id      uint16
	df, mf  bool
	fragOff uint16 // in 8-byte units
	ihlOpts bool   // add 4 bytes of IPv4 options
	// Fields that must not matter:
	ttl      uint8
	tos      uint8 // DSCP<<2 | ECN
	label    uint32
	vlans    []uint16 // outermost first; two = QinQ (0x88a8 outer)
	mpls     []uint32 // labels
	srcMAC   byte
	dstMAC   byte
	csumXor  uint16 // XORed into the L4 checksum after serialization
	padTo    int    // Ethernet padding up to this many bytes, filled with padByte
	padByte  byte
	v6ext    []byte // raw IPv6 extension headers before the upper layer; first byte of each is fixed up
	v6extNHs []uint8
	noL4     bool // non-first IPv6 fragment: no checksum to tamper with
}

func (p pk) protoNum() uint8 {
	switch p.proto {
	case "tcp":
		return 6
	case "udp":
		return 17
	case "icmp":
		if p.v6 {
			return 58
		}
		return 1
	}
	return 253 // experimental
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// l4 returns the serialized L4 header + payload (checksums over the pseudo-header).
func (p pk) l4(t testing.TB, nl gopacket.NetworkLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	var ls []gopacket.SerializableLayer
	switch p.proto {
	case "tcp":
		tcp := &layers.TCP{SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport), Seq: p.seq, Ack: p.ack,
			Window: p.window, SYN: p.syn, PSH: p.psh, ACK: p.ack != 0}
		if p.tcpOpts {
			tcp.Options = []layers.TCPOption{
				{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{5, 0xb4}},
				{OptionType: layers.TCPOptionKindNop},
				{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
				{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
				{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindNop},
			}
		}
		if err := tcp.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, tcp)
	case "udp":
		udp := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		if err := udp.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, udp)
	case "icmp":
		if p.v6 {
			ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(p.icmpType, p.icmpCode)}
			if err := ic.SetNetworkLayerForChecksum(nl); err != nil {
				t.Fatal(err)
			}
			var rest [4]byte
			binary.BigEndian.PutUint16(rest[:], p.icmpID)
			binary.BigEndian.PutUint16(rest[2:], p.icmpSeq)
			ls = append(ls, ic, gopacket.Payload(rest[:]))
		} else {
			ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(p.icmpType, p.icmpCode), Id: p.icmpID, Seq: p.icmpSeq})
		}
	}
	ls = append(ls, gopacket.Payload(p.payload))
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatal(err)
	}
	b := append([]byte(nil), buf.Bytes()...)
	if at, ok := map[string]int{"tcp": 16, "udp": 6, "icmp": 2}[p.proto]; ok && p.csumXor != 0 && !p.noL4 {
		binary.BigEndian.PutUint16(b[at:], binary.BigEndian.Uint16(b[at:])^p.csumXor)
	}
	return b
}

// ipPacket returns the IP packet (no L2).
func (p pk) ipPacket(t testing.TB) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if p.v6 {
		ip := &layers.IPv6{Version: 6, TrafficClass: p.tos, FlowLabel: p.label, HopLimit: p.ttl,
			NextHeader: layers.IPProtocol(p.protoNum()), SrcIP: net.IP(mustAddr(p.src).AsSlice()), DstIP: net.IP(mustAddr(p.dst).AsSlice())}
		l4 := p.l4(t, ip)
		body := l4
		if len(p.v6ext) > 0 {
			ext := append([]byte(nil), p.v6ext...)
			// chain the next-header fields: each header's first byte names the next.
			pos := 0
			for i, nh := range p.v6extNHs {
				next := p.protoNum()
				if i+1 < len(p.v6extNHs) {
					next = p.v6extNHs[i+1]
				}
				ext[pos] = next
				l := (int(ext[pos+1]) + 1) * 8
				if nh == 44 {
					l = 8
				}
				pos += l
			}
			ip.NextHeader = layers.IPProtocol(p.v6extNHs[0])
			body = append(ext, l4...)
		}
		if err := gopacket.SerializeLayers(buf, opts, ip, gopacket.Payload(body)); err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), buf.Bytes()...)
	}
	ip := &layers.IPv4{Version: 4, TOS: p.tos, TTL: p.ttl, Id: p.id, Protocol: layers.IPProtocol(p.protoNum()),
		FragOffset: p.fragOff, SrcIP: net.IP(mustAddr(p.src).AsSlice()), DstIP: net.IP(mustAddr(p.dst).AsSlice())}
	if p.df {
		ip.Flags |= layers.IPv4DontFragment
	}
	if p.mf {
		ip.Flags |= layers.IPv4MoreFragments
	}
	if p.ihlOpts {
		ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	}
	var body []byte
	if p.fragOff == 0 {
		body = p.l4(t, ip)
	} else {
		body = p.payload // a non-first fragment carries raw bytes
	}
	if err := gopacket.SerializeLayers(buf, opts, ip, gopacket.Payload(body)); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// frame returns the packet as an Ethernet frame.
func (p pk) frame(t testing.TB) []byte {
	t.Helper()
	ipb := p.ipPacket(t)
	var l2 []byte
	l2 = append(l2, 0x02, 0, 0, 0, 0, p.dstMAC, 0x02, 0, 0, 0, 0, p.srcMAC)
	et := uint16(etIPv4)
	if p.v6 {
		et = etIPv6
	}
	if len(p.mpls) > 0 {
		et = etMPLS
	}
	types := []uint16{}
	for i := range p.vlans {
		if i == 0 && len(p.vlans) > 1 {
			types = append(types, etQinQ)
		} else {
			types = append(types, etVLAN)
		}
	}
	types = append(types, et)
	l2 = binary.BigEndian.AppendUint16(l2, types[0])
	for i, v := range p.vlans {
		l2 = binary.BigEndian.AppendUint16(l2, v)
		l2 = binary.BigEndian.AppendUint16(l2, types[i+1])
	}
	for i, lbl := range p.mpls {
		w := lbl<<12 | 64 // TTL 64
		if i == len(p.mpls)-1 {
			w |= 1 << 8
		}
		l2 = binary.BigEndian.AppendUint32(l2, w)
	}
	f := append(l2, ipb...)
	for len(f) < p.padTo {
		f = append(f, p.padByte)
	}
	return f
}

// specSeed derives the seed as docs/capture.md says.
func specSeed(use, seed string) uint64 {
	s := sha256.Sum256([]byte("lds/capture/v1/" + use + "\x00" + seed))
	return binary.LittleEndian.Uint64(s[:8])
}

// spec computes the expected (unaggregated) flow key and packet hash from
// the fields, following the documented layout (hash version 2) with the
// default identity.ip_bytes.
func (p pk) spec(t testing.TB, seed string, n int) (FlowKey, uint64, uint64) {
	t.Helper()
	return p.specB(t, seed, n, DefaultIPBytes)
}

// specB is spec with identity.ip_bytes = bound; the packet's headers
// must fit in it.
func (p pk) specB(t testing.TB, seed string, n, bound int) (FlowKey, uint64, uint64) {
	t.Helper()
	proto := p.protoNum()
	var sport, dport uint16
	nonFirst := !p.v6 && p.fragOff != 0
	var b []byte
	src, dst := mustAddr(p.src), mustAddr(p.dst)
	l4 := []byte{}
	var l4len int
	hasL4 := !nonFirst && proto != 253
	switch {
	case !hasL4:
	case p.proto == "tcp":
		sport, dport = p.sport, p.dport
		hdr := 20
		if p.tcpOpts {
			hdr = 32
		}
		flags := byte(0)
		if p.syn {
			flags |= 0x02
		}
		if p.psh {
			flags |= 0x08
		}
		if p.ack != 0 {
			flags |= 0x10
		}
		l4 = binary.BigEndian.AppendUint16(l4, sport)
		l4 = binary.BigEndian.AppendUint16(l4, dport)
		l4 = binary.BigEndian.AppendUint32(l4, p.seq)
		l4 = binary.BigEndian.AppendUint32(l4, p.ack)
		l4 = append(l4, byte(hdr/4)<<4, flags)
		l4 = binary.BigEndian.AppendUint16(l4, p.window)
		l4len = hdr
	case p.proto == "udp":
		sport, dport = p.sport, p.dport
		l4 = binary.BigEndian.AppendUint16(l4, sport)
		l4 = binary.BigEndian.AppendUint16(l4, dport)
		l4 = binary.BigEndian.AppendUint16(l4, uint16(8+len(p.payload)))
		l4len = 8
	case p.proto == "icmp":
		sport = uint16(p.icmpType)<<8 | uint16(p.icmpCode)
		echo := (!p.v6 && (p.icmpType == 0 || p.icmpType == 8)) || (p.v6 && (p.icmpType == 128 || p.icmpType == 129))
		if echo {
			dport = p.icmpID
		}
		l4 = append(l4, p.icmpType, p.icmpCode)
		l4 = binary.BigEndian.AppendUint16(l4, p.icmpID)
		l4 = binary.BigEndian.AppendUint16(l4, p.icmpSeq)
		l4len = 8
	}
	ipHdr := 20
	if p.v6 {
		ipHdr = 40 + len(p.v6ext)
	} else if p.ihlOpts {
		ipHdr = 24
	}
	if ipHdr+l4len > bound {
		t.Fatalf("spec: headers of %d bytes exceed ip_bytes %d", ipHdr+l4len, bound)
	}
	payload := p.payload
	payload = payload[:min(len(payload), n, bound-ipHdr-l4len)]
	if p.v6 {
		b = append(b, 6)
		s16, d16 := src.As16(), dst.As16()
		b = append(b, s16[:]...)
		b = append(b, d16[:]...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.v6ext)+l4len+len(p.payload)))
		b = append(b, proto, 0)
		if len(p.v6ext) > 0 {
			t.Fatal("spec: IPv6 extension headers are checked by invariance, not by spec")
		}
	} else {
		b = append(b, 4)
		s4, d4 := src.As4(), dst.As4()
		b = append(b, s4[:]...)
		b = append(b, d4[:]...)
		b = append(b, proto)
		b = binary.BigEndian.AppendUint16(b, p.id)
		ihl := 20
		if p.ihlOpts {
			ihl = 24
		}
		b = binary.BigEndian.AppendUint16(b, uint16(ihl+l4len+len(p.payload)))
		fw := p.fragOff
		if p.df {
			fw |= 0x4000
		}
		if p.mf {
			fw |= 0x2000
		}
		b = binary.BigEndian.AppendUint16(b, fw)
	}
	b = append(b, l4...)
	b = append(b, payload...)
	k, err := FlowKeyFromAddrs(src, dst, proto, sport, dport)
	if err != nil {
		t.Fatal(err)
	}
	fh := xxh3.HashSeed(k.AppendBinary(nil), specSeed("flow", seed))
	return k, fh, xxh3.HashSeed(b, specSeed("packet", seed))
}

func testParser(t testing.TB, mut func(*Config)) *Parser {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Identity.Seed = "test-seed"
	if mut != nil {
		mut(&cfg)
	}
	p, err := NewParser(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func seqBytes(n int, start byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}
