package gen

import (
	"encoding/binary"
)

// IP protocol numbers used here.
const (
	protoICMP   = 1
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
)

const (
	ethHdrLen  = 14
	vlanTagLen = 4
	l2Room     = ethHdrLen + vlanTagLen // IP always starts here in the frame buffers
	maxFrame   = l2Room + 40 + 20 + 1440
)

// pktSpec is what differs from one packet to the next of a flow.
type pktSpec struct {
	payloadLen int
	counter    uint64 // unique per packet in the trace: first 8 payload bytes
	ipid       uint16
	seq, ack   uint32 // TCP
	icmpSeq    uint16
	tos        uint8 // IPv4 TOS / IPv6 traffic class at the sender tap
	offload    bool  // L4 checksum unfinished at the sender tap
}

// buildIP writes the sender tap's IP packet (headers and the whole payload)
// at b[l2Room:] and returns its length and the correct L4 checksum. The L4
// checksum field is correct unless sp.offload (TCP/UDP only), in which case
// it holds only the folded pseudo-header sum, as a NIC with checksum offload
// would still have to finish it.
func buildIP(b []byte, f *flow, sp *pktSpec) (n int, l4ck uint16) {
	ip := b[l2Room:]
	var l4len int
	switch f.proto {
	case protoTCP:
		l4len = 20 + sp.payloadLen
	default: // UDP, ICMP echo: 8-byte header
		l4len = 8 + sp.payloadLen
	}
	var hl int
	if f.v6 {
		hl = 40
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(sp.tos)<<20|f.flowLabel)
		binary.BigEndian.PutUint16(ip[4:], uint16(l4len))
		ip[6] = f.proto
		ip[7] = f.ttl
		copy(ip[8:24], f.src[:])
		copy(ip[24:40], f.dst[:])
	} else {
		hl = 20
		ip[0] = 0x45
		ip[1] = sp.tos
		binary.BigEndian.PutUint16(ip[2:], uint16(hl+l4len))
		binary.BigEndian.PutUint16(ip[4:], sp.ipid)
		if f.proto == protoTCP {
			binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		} else {
			binary.BigEndian.PutUint16(ip[6:], 0)
		}
		ip[8] = f.ttl
		ip[9] = f.proto
		ip[10], ip[11] = 0, 0
		copy(ip[12:16], f.src[:4])
		copy(ip[16:20], f.dst[:4])
		binary.BigEndian.PutUint16(ip[10:], ^fold(sum16(ip[:20], 0)))
	}
	l4 := ip[hl : hl+l4len]
	var pay []byte
	var ckOff int
	switch f.proto {
	case protoTCP:
		binary.BigEndian.PutUint16(l4[0:], f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
		binary.BigEndian.PutUint32(l4[4:], sp.seq)
		binary.BigEndian.PutUint32(l4[8:], sp.ack)
		l4[12] = 5 << 4
		flags := byte(0x10) // ACK
		if sp.payloadLen > 0 {
			flags |= 0x08 // PSH
		}
		l4[13] = flags
		binary.BigEndian.PutUint16(l4[14:], f.window)
		l4[16], l4[17], l4[18], l4[19] = 0, 0, 0, 0
		pay = l4[20:]
		ckOff = 16
	case protoUDP:
		binary.BigEndian.PutUint16(l4[0:], f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(l4len))
		l4[6], l4[7] = 0, 0
		pay = l4[8:]
		ckOff = 6
	default: // ICMP / ICMPv6 echo request
		l4[0] = byte(f.sport >> 8)
		l4[1] = byte(f.sport)
		l4[2], l4[3] = 0, 0
		binary.BigEndian.PutUint16(l4[4:], f.dport) // identifier
		binary.BigEndian.PutUint16(l4[6:], sp.icmpSeq)
		pay = l4[8:]
		ckOff = 2
	}
	fillPayload(pay, sp.counter)

	var pseudo uint32
	if f.proto != protoICMP { // ICMPv4 has no pseudo-header
		pseudo = pseudoSum(f, l4len)
	}
	ck := ^fold(sum16(l4, pseudo))
	if ck == 0 && f.proto == protoUDP {
		ck = 0xffff // 0 means "no checksum" in UDP
	}
	if sp.offload {
		binary.BigEndian.PutUint16(l4[ckOff:], fold(pseudo))
	} else {
		binary.BigEndian.PutUint16(l4[ckOff:], ck)
	}
	return hl + l4len, ck
}

// fillPayload writes the packet's unique counter and then filler bytes that
// vary from packet to packet (so checksums and payload hashes do too).
func fillPayload(p []byte, counter uint64) {
	var tmp [8]byte
	binary.BigEndian.PutUint64(tmp[:], counter)
	n := copy(p, tmp[:])
	x := splitmix(counter)
	for ; n+8 <= len(p); n += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(p[n:], x)
	}
	x = splitmix(x)
	for ; n < len(p); n++ {
		p[n] = byte(x)
		x >>= 8
	}
}

func pseudoSum(f *flow, l4len int) uint32 {
	var s uint32
	if f.v6 {
		s = sum16(f.src[:16], 0)
		s = sum16(f.dst[:16], s)
		s += uint32(l4len>>16) + uint32(l4len&0xffff)
	} else {
		s = sum16(f.src[:4], 0)
		s = sum16(f.dst[:4], s)
		s += uint32(l4len)
	}
	return s + uint32(f.proto)
}

// sum16 adds b as big-endian 16-bit words to s (ones-complement sum, not yet
// folded). 32-bit loads keep it fast for full-size payloads.
func sum16(b []byte, s uint32) uint32 {
	acc := uint64(s)
	for len(b) >= 4 {
		acc += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	for acc>>32 != 0 {
		acc = acc&0xffffffff + acc>>32
	}
	return uint32(acc&0xffff) + uint32(acc>>16)
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// writeL2 writes the Ethernet header (with an 802.1Q tag when vid >= 0) so
// that it ends at b[l2Room], and returns the offset where the frame starts.
func writeL2(b []byte, dst, src [6]byte, vid int, etherType uint16) int {
	off := 0
	if vid < 0 {
		off = vlanTagLen
	}
	h := b[off:l2Room]
	copy(h[0:6], dst[:])
	copy(h[6:12], src[:])
	if vid >= 0 {
		binary.BigEndian.PutUint16(h[12:], 0x8100)
		binary.BigEndian.PutUint16(h[14:], uint16(vid&0x0fff))
		binary.BigEndian.PutUint16(h[16:], etherType)
	} else {
		binary.BigEndian.PutUint16(h[12:], etherType)
	}
	return off
}

// rewriteForReceiver copies the first n bytes of the sender's IP packet to
// dst and applies the changes between the taps: TTL / hop limit, traffic
// class, L4 checksum finished (offload), IPv4 header checksum recomputed.
// Only the captured prefix is needed, so only that is copied; the L4
// checksum to finish is passed in (it covers the whole payload).
func rewriteForReceiver(dst, src []byte, n int, f *flow, ttlDec bool, tos uint8, l4ck uint16, fixL4 bool) {
	copy(dst[:n], src[:n])
	if f.v6 {
		v := binary.BigEndian.Uint32(dst[0:])
		v = v&^(0xff<<20) | uint32(tos)<<20
		binary.BigEndian.PutUint32(dst[0:], v)
		if ttlDec {
			dst[7]--
		}
	} else {
		dst[1] = tos
		if ttlDec {
			dst[8]--
		}
		dst[10], dst[11] = 0, 0
		binary.BigEndian.PutUint16(dst[10:], ^fold(sum16(dst[:20], 0)))
	}
	if fixL4 {
		off := f.l4Off() + f.l4CkOff()
		if off+2 <= n {
			binary.BigEndian.PutUint16(dst[off:], l4ck)
		}
	}
}

func (f *flow) l4Off() int {
	if f.v6 {
		return 40
	}
	return 20
}

func (f *flow) l4CkOff() int {
	switch f.proto {
	case protoTCP:
		return 16
	case protoUDP:
		return 6
	}
	return 2
}
