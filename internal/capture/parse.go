package capture

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/gopacket/gopacket/layers"
	"github.com/lds-net/lds/internal/match"
)

// Packet is one measured packet, ready for the sketches.
type Packet struct {
	TS       int64   // capture timestamp, Unix ns
	Key      FlowKey // after aggregation
	FlowHash uint64  // seeded xxh3 of Key.AppendBinary
	PktHash  uint64  // seeded xxh3 of the invariant bytes (docs/capture.md)
	WireLen  uint32
	Weight   uint32 // from weight rules, default 1
	Class    uint16 // index into Config.Classes plus one; 0 = default class
	IDKind   IDKind // what ID is
	ID       uint32 // the packet's own identifier: TCP sequence number, else IPv4 identification
}

// IDKind says which header field a packet's ID is.
type IDKind uint8

// Packet identifiers: a TCP segment's is its sequence number, another
// IPv4 packet's its identification; other packets have none.
const (
	IDNone IDKind = iota
	IDIPv4
	IDTCPSeq
)

// Reason says why a frame was skipped (or ReasonOK).
type Reason uint8

// Reasons a frame is skipped. Each is counted; none is logged per packet.
const (
	ReasonOK              Reason = iota
	ReasonNonIP                  // not IPv4/IPv6 (ARP, LLDP, ...)
	ReasonTruncated              // capture ends inside the headers
	ReasonMalformed              // header fields contradict each other or the frame
	ReasonShortSnap              // headers fine, but fewer payload bytes captured than identity hashes
	ReasonUnsupportedLink        // link type this parser does not decode
	ReasonNotSelected            // parsed, but no select rule matched
	ReasonLongHeaders            // IP + L4 headers longer than identity.ip_bytes
	numReasons
)

var reasonNames = [numReasons]string{"ok", "non_ip", "truncated", "malformed", "short_snap", "unsupported_link", "not_selected", "long_headers"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", r)
}

// ParseCounters counts frames by outcome, cumulative since NewParser.
type ParseCounters struct {
	Parsed          uint64 // handed out as Packets
	Fragments       uint64 // of Parsed: non-first fragments (no ports; see docs)
	NonIP           uint64
	Truncated       uint64
	Malformed       uint64
	ShortSnap       uint64
	UnsupportedLink uint64
	NotSelected     uint64
	LongHeaders     uint64
}

// Add returns the field-wise sum (to total the workers).
func (c ParseCounters) Add(o ParseCounters) ParseCounters {
	return ParseCounters{c.Parsed + o.Parsed, c.Fragments + o.Fragments, c.NonIP + o.NonIP, c.Truncated + o.Truncated,
		c.Malformed + o.Malformed, c.ShortSnap + o.ShortSnap, c.UnsupportedLink + o.UnsupportedLink, c.NotSelected + o.NotSelected,
		c.LongHeaders + o.LongHeaders}
}

// ByReason returns the skip counters by reason name (for a labelled metric).
func (c ParseCounters) ByReason() map[string]uint64 {
	return map[string]uint64{"non_ip": c.NonIP, "truncated": c.Truncated, "malformed": c.Malformed,
		"short_snap": c.ShortSnap, "unsupported_link": c.UnsupportedLink, "not_selected": c.NotSelected,
		"long_headers": c.LongHeaders}
}

// Sizes of the hashed sections (docs/capture.md).
const (
	hbIPMax = 1 + 16 + 16 + 2 + 1 + 1 + 2 + 4 // IPv6 with fragment fields
	hbL4Max = 16                              // TCP
	hbCap   = hbIPMax + hbL4Max + MaxPayloadBytes
)

// Parser decodes frames into Packets. One per worker: not safe for
// concurrent use. Parse allocates nothing.
type Parser struct {
	n         int
	bound     int // identity.ip_bytes: identity reads no byte beyond it, counted from the IP header
	flowHash  flowHasher
	pktHash   pktHasher
	m4s, m4d  [4]byte
	m6s, m6d  [16]byte
	keepProto bool
	keepPorts bool
	sel       []match.Compiled
	weights   []match.Compiled
	weightVal []uint32
	classes   []match.Compiled
	c         [numReasons]uint64
	frags     uint64
	hb        [hbCap]byte
}

// NewParser validates the identity and rule parts of cfg and builds a parser.
func NewParser(cfg Config) (*Parser, error) {
	cfg.Source = SourceConfig{Kind: "file", File: "-"} // the source is checked where it is opened
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	id := cfg.Identity
	p := &Parser{
		n:         id.PayloadBytes,
		bound:     id.IPBytes,
		flowHash:  newFlowHasher(deriveSeed("flow", id.Seed)),
		pktHash:   newPktHasher(deriveSeed("packet", id.Seed)),
		keepProto: id.FlowKey.Proto,
		keepPorts: id.FlowKey.Ports,
	}
	setMask(p.m4s[:], id.FlowKey.SrcPrefixV4)
	setMask(p.m4d[:], id.FlowKey.DstPrefixV4)
	setMask(p.m6s[:], id.FlowKey.SrcPrefixV6)
	setMask(p.m6d[:], id.FlowKey.DstPrefixV6)
	var err error
	if p.sel, err = match.CompileAll("capture.select", cfg.Select); err != nil {
		return nil, err
	}
	for i, w := range cfg.Weights {
		c, err := w.Rule.Compile(fmt.Sprintf("capture.weights[%d]", i))
		if err != nil {
			return nil, err
		}
		p.weights = append(p.weights, c)
		p.weightVal = append(p.weightVal, w.Weight)
	}
	if p.classes, err = match.CompileAll("capture.classes", cfg.Classes); err != nil {
		return nil, err
	}
	return p, nil
}

// deriveSeed turns the shared seed string into independent 64-bit seeds
// for the flow and the packet hash (unchanged since hash version 1): the first 8 bytes,
// little endian, of SHA-256("lds/capture/v1/" + use + "\x00" + seed).
func deriveSeed(use, seed string) uint64 {
	s := sha256.Sum256([]byte("lds/capture/v1/" + use + "\x00" + seed))
	return binary.LittleEndian.Uint64(s[:8])
}

func setMask(m []byte, bits int) {
	for i := range m {
		switch {
		case bits >= 8:
			m[i] = 0xff
			bits -= 8
		case bits > 0:
			m[i] = byte(0xff << (8 - bits))
			bits = 0
		default:
			m[i] = 0
		}
	}
}

// Counters returns the cumulative counters.
func (p *Parser) Counters() ParseCounters {
	return ParseCounters{
		Parsed: p.c[ReasonOK], Fragments: p.frags, NonIP: p.c[ReasonNonIP], Truncated: p.c[ReasonTruncated],
		Malformed: p.c[ReasonMalformed], ShortSnap: p.c[ReasonShortSnap], UnsupportedLink: p.c[ReasonUnsupportedLink],
		NotSelected: p.c[ReasonNotSelected], LongHeaders: p.c[ReasonLongHeaders],
	}
}

// fields are the invariant fields of one packet before aggregation.
type fields struct {
	src, dst     [16]byte
	v6           bool
	proto        uint8
	sport, dport uint16
	fragment     bool // non-first fragment: no L4 header
	id           uint32
	idKind       IDKind
}

// Parse decodes one frame. It returns false, and counts the reason, for a
// frame that is not measured. wireLen is the frame's length on the wire
// (>= len(data)); ts is the capture time in Unix ns.
func (p *Parser) Parse(data []byte, wireLen int, ts int64, link layers.LinkType, out *Packet) bool {
	var f fields
	hn, r := p.identify(data, wireLen, link, &f)
	if r == ReasonOK && len(p.sel) > 0 {
		src, dst := f.addrs()
		if match.First(p.sel, src, dst, f.proto, f.sport, f.dport) < 0 {
			r = ReasonNotSelected
		}
	}
	p.c[r]++
	if r != ReasonOK {
		return false
	}
	if f.fragment {
		p.frags++
	}
	p.finish(&f, hn, out)
	out.TS = ts
	out.WireLen = uint32(wireLen)
	out.Weight, out.Class = 1, 0
	if len(p.weights) > 0 || len(p.classes) > 0 {
		src, dst := f.addrs()
		if i := match.First(p.weights, src, dst, f.proto, f.sport, f.dport); i >= 0 {
			out.Weight = p.weightVal[i]
		}
		if i := match.First(p.classes, src, dst, f.proto, f.sport, f.dport); i >= 0 {
			out.Class = uint16(i + 1)
		}
	}
	return true
}

// Identify computes the flow key (after aggregation) and both hashes of a
// raw frame, without selection, weights or classes and without touching
// the counters: for ground-truth joins and tests. out.TS and out.WireLen
// are left zero and wireLen defaults to len(data) when 0.
func (p *Parser) Identify(data []byte, wireLen int, link layers.LinkType) (Packet, Reason) {
	if wireLen == 0 {
		wireLen = len(data)
	}
	var f fields
	var out Packet
	hn, r := p.identify(data, wireLen, link, &f)
	if r != ReasonOK {
		return out, r
	}
	p.finish(&f, hn, &out)
	out.Weight = 1
	return out, ReasonOK
}

func (f *fields) addrs() (netip.Addr, netip.Addr) {
	if f.v6 {
		return netip.AddrFrom16(f.src), netip.AddrFrom16(f.dst)
	}
	return netip.AddrFrom4([4]byte(f.src[:4])), netip.AddrFrom4([4]byte(f.dst[:4]))
}

// finish aggregates the key and computes both hashes.
func (p *Parser) finish(f *fields, hn int, out *Packet) {
	k := &out.Key
	*k = FlowKey{V6: f.v6}
	// Word-wide masks: the flow hash reads the key back in words, which
	// byte stores would stall.
	le := binary.LittleEndian
	if f.v6 {
		for i := 0; i < 16; i += 8 {
			le.PutUint64(k.Src[i:], le.Uint64(f.src[i:])&le.Uint64(p.m6s[i:]))
			le.PutUint64(k.Dst[i:], le.Uint64(f.dst[i:])&le.Uint64(p.m6d[i:]))
		}
	} else {
		le.PutUint32(k.Src[:], le.Uint32(f.src[:])&le.Uint32(p.m4s[:]))
		le.PutUint32(k.Dst[:], le.Uint32(f.dst[:])&le.Uint32(p.m4d[:]))
	}
	if p.keepProto {
		k.Proto = f.proto
	}
	if p.keepPorts {
		k.SPort, k.DPort = f.sport, f.dport
	}
	out.FlowHash = p.flowHash.hash(k)
	out.PktHash = p.pktHash.hash(p.hb[:hn])
	out.ID, out.IDKind = f.id, f.idKind
}

func be16(b []byte) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }

// EtherTypes this parser looks through or into.
const (
	etIPv4   = 0x0800
	etIPv6   = 0x86dd
	etVLAN   = 0x8100
	etQinQ   = 0x88a8
	etQinQ2  = 0x9100
	etMPLS   = 0x8847
	etMPLSmc = 0x8848
)

// identify fills f and the hash buffer; it returns the number of hashed bytes.
func (p *Parser) identify(data []byte, wireLen int, link layers.LinkType, f *fields) (int, Reason) {
	if wireLen < len(data) {
		wireLen = len(data)
	}
	off := 0
	var et uint16
	switch link {
	case layers.LinkTypeEthernet:
		if len(data) < 14 {
			return 0, ReasonTruncated
		}
		et, off = be16(data[12:]), 14
	case layers.LinkTypeLinuxSLL:
		if len(data) < 16 {
			return 0, ReasonTruncated
		}
		et, off = be16(data[14:]), 16
	case layers.LinkTypeLinuxSLL2:
		if len(data) < 20 {
			return 0, ReasonTruncated
		}
		et, off = be16(data[0:]), 20
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, 12: // 12: DLT_RAW on some BSDs
		return p.ipByVersion(data, wireLen, 0, f)
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		if len(data) < 4 {
			return 0, ReasonTruncated
		}
		// AF_ value in the writer's byte order (Null) or network order (Loop).
		fam := binary.LittleEndian.Uint32(data)
		if fam > 0xffff {
			fam = binary.BigEndian.Uint32(data)
		}
		switch fam {
		case 2:
			return p.ipv4(data, wireLen, 4, f)
		case 10, 24, 28, 30:
			return p.ipv6(data, wireLen, 4, f)
		}
		return 0, ReasonNonIP
	default:
		return 0, ReasonUnsupportedLink
	}
	for {
		switch et {
		case etIPv4:
			return p.ipv4(data, wireLen, off, f)
		case etIPv6:
			return p.ipv6(data, wireLen, off, f)
		case etVLAN, etQinQ, etQinQ2:
			if len(data) < off+4 {
				return 0, ReasonTruncated
			}
			et = be16(data[off+2:])
			off += 4
		case etMPLS, etMPLSmc:
			for {
				if len(data) < off+4 {
					return 0, ReasonTruncated
				}
				bos := data[off+2]&1 != 0
				off += 4
				if bos {
					break
				}
			}
			return p.ipByVersion(data, wireLen, off, f)
		default:
			return 0, ReasonNonIP
		}
	}
}

func (p *Parser) ipByVersion(data []byte, wireLen, off int, f *fields) (int, Reason) {
	if len(data) <= off {
		return 0, ReasonTruncated
	}
	switch data[off] >> 4 {
	case 4:
		return p.ipv4(data, wireLen, off, f)
	case 6:
		return p.ipv6(data, wireLen, off, f)
	}
	return 0, ReasonNonIP
}

func (p *Parser) ipv4(data []byte, wireLen, off int, f *fields) (int, Reason) {
	ip := data[off:]
	if len(ip) < 20 {
		return 0, ReasonTruncated
	}
	if ip[0]>>4 != 4 {
		return 0, ReasonMalformed
	}
	ihl := int(ip[0]&0x0f) * 4
	tot := int(be16(ip[2:]))
	if ihl < 20 || tot < ihl || tot > wireLen-off {
		return 0, ReasonMalformed
	}
	if ihl > p.bound {
		return 0, ReasonLongHeaders
	}
	if len(ip) < ihl {
		return 0, ReasonTruncated
	}
	if len(ip) > tot {
		ip = ip[:tot] // drop link-layer padding
	}
	hb := &p.hb
	hb[0] = 4
	copy(hb[1:9], ip[12:20]) // src, dst
	hb[9] = ip[9]            // protocol
	copy(hb[10:12], ip[4:6]) // identification
	copy(hb[12:14], ip[2:4]) // total length
	copy(hb[14:16], ip[6:8]) // flags, fragment offset
	copy(f.src[:4], ip[12:16])
	copy(f.dst[:4], ip[16:20])
	f.proto = ip[9]
	f.id, f.idKind = uint32(be16(ip[4:])), IDIPv4
	frag := be16(ip[6:])
	f.fragment = frag&0x1fff != 0
	isFrag := frag&0x3fff != 0 // MF or an offset
	return p.l4(ip[ihl:], tot-ihl, ihl, 16, isFrag, f)
}

func (p *Parser) ipv6(data []byte, wireLen, off int, f *fields) (int, Reason) {
	ip := data[off:]
	if len(ip) < 40 {
		return 0, ReasonTruncated
	}
	if ip[0]>>4 != 6 {
		return 0, ReasonMalformed
	}
	plen := int(be16(ip[4:]))
	end := 40 + plen
	if plen == 0 || end > wireLen-off { // 0: jumbogram, not measured
		return 0, ReasonMalformed
	}
	if len(ip) > end {
		ip = ip[:end]
	}
	f.v6 = true
	copy(f.src[:], ip[8:24])
	copy(f.dst[:], ip[24:40])
	hb := &p.hb
	hb[0] = 6
	copy(hb[1:33], ip[8:40])
	copy(hb[33:35], ip[4:6]) // payload length
	nh := ip[6]
	pos := 40
	isFrag := false
	hn := 37
	hb[36] = 0
ext:
	for {
		switch nh {
		case 0, 43, 60, 51: // hop-by-hop, routing, destination options, AH
			if len(ip) < pos+2 {
				if pos+2 > end {
					return 0, ReasonMalformed
				}
				if pos+2 > p.bound {
					return 0, ReasonLongHeaders
				}
				return 0, ReasonTruncated
			}
			l := (int(ip[pos+1]) + 1) * 8
			if nh == 51 {
				l = (int(ip[pos+1]) + 2) * 4
			}
			if pos+l > end {
				return 0, ReasonMalformed
			}
			if pos+l > p.bound {
				return 0, ReasonLongHeaders
			}
			if len(ip) < pos+l {
				return 0, ReasonTruncated
			}
			nh = ip[pos]
			pos += l
		case 44: // fragment
			if pos+8 > end {
				return 0, ReasonMalformed
			}
			if pos+8 > p.bound {
				return 0, ReasonLongHeaders
			}
			if len(ip) < pos+8 {
				return 0, ReasonTruncated
			}
			if isFrag { // a second fragment header
				return 0, ReasonMalformed
			}
			isFrag = true
			fw := be16(ip[pos+2:]) & 0xfff9 // offset and M, reserved bits cleared
			hb[36] = 1
			hb[37], hb[38] = byte(fw>>8), byte(fw)
			copy(hb[39:43], ip[pos+4:pos+8]) // identification
			hn = 43
			nh = ip[pos]
			pos += 8
			if fw>>3 != 0 {
				f.fragment = true
				break ext
			}
		default:
			break ext
		}
	}
	hb[35] = nh // upper-layer protocol
	f.proto = nh
	return p.l4(ip[pos:], end-pos, pos, hn, isFrag, f)
}

// l4 hashes the L4 header (no checksum) and min(N, payload on the wire,
// ip_bytes - IP and L4 headers) payload bytes. seg is the captured rest
// of the IP packet, segWire its length on the wire, ipHdr the length of
// the IP header (and extension headers) before it, hn the bytes already
// in the hash buffer. Every length it decides by comes from the headers,
// never from the capture, so both taps hash the same bytes.
func (p *Parser) l4(seg []byte, segWire, ipHdr, hn int, isFrag bool, f *fields) (int, Reason) {
	hb := &p.hb
	payOff := 0
	if !f.fragment {
		need := 0
		switch f.proto {
		case 6:
			need = 20
		case 17, 1, 58:
			need = 8
		}
		if need > 0 && segWire < need {
			if !isFrag {
				return 0, ReasonMalformed
			}
			need = 0 // a first fragment too small for its L4 header: opaque
		}
		if need > 0 && ipHdr+need > p.bound {
			return 0, ReasonLongHeaders
		}
		if need > 0 && len(seg) < need {
			return 0, ReasonTruncated
		}
		switch {
		case need == 0:
		case f.proto == 6:
			doff := int(seg[12]>>4) * 4
			if doff < 20 {
				return 0, ReasonMalformed
			}
			if doff > segWire {
				if !isFrag {
					return 0, ReasonMalformed
				}
				break // options run past the first fragment: opaque
			}
			if ipHdr+doff > p.bound {
				return 0, ReasonLongHeaders
			}
			if len(seg) < doff {
				return 0, ReasonTruncated
			}
			f.sport, f.dport = be16(seg), be16(seg[2:])
			f.id, f.idKind = uint32(be16(seg[4:]))<<16|uint32(be16(seg[6:])), IDTCPSeq
			// ports, seq, ack, data offset + flags, window: bytes 0-15
			copy(hb[hn:hn+16], seg[:16])
			hn += 16
			payOff = doff
		case f.proto == 17:
			f.sport, f.dport = be16(seg), be16(seg[2:])
			copy(hb[hn:hn+6], seg[:6]) // ports, length
			hn += 6
			payOff = 8
		default: // ICMP, ICMPv6
			t, code := seg[0], seg[1]
			f.sport = uint16(t)<<8 | uint16(code)
			if (f.proto == 1 && (t == 0 || t == 8)) || (f.proto == 58 && (t == 128 || t == 129)) {
				f.dport = be16(seg[4:])
			}
			hb[hn], hb[hn+1] = t, code
			copy(hb[hn+2:hn+6], seg[4:8]) // rest of header (id, seq for echo)
			hn += 6
			payOff = 8
		}
	}
	take := min(segWire-payOff, p.n, p.bound-ipHdr-payOff)
	if len(seg) < payOff+take {
		return 0, ReasonShortSnap
	}
	copy(hb[hn:hn+take], seg[payOff:payOff+take])
	return hn + take, ReasonOK
}
