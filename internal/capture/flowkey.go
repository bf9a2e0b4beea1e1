package capture

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// FlowKey is the (possibly aggregated) flow identity of a packet. It is
// comparable, fixed size and pointer-free so it can be a map key.
//
// Addresses: an IPv4 address is stored in the first 4 bytes of Src/Dst with
// the other 12 bytes zero and V6 false; an IPv6 address uses all 16 bytes
// and V6 true. (Not v4-mapped: the wire form then stays short for IPv4.)
//
// Ports: TCP and UDP ports. ICMP/ICMPv6: SPort = type<<8|code, DPort = the
// echo identifier for echo request/reply, else 0. Other protocols and
// non-first fragments: 0.
type FlowKey struct {
	Src, Dst     [16]byte
	SPort, DPort uint16
	Proto        uint8
	V6           bool
}

// FlowKeyBinaryLenV4 and FlowKeyBinaryLenV6 are the sizes of AppendBinary.
const (
	FlowKeyBinaryLenV4 = 6 + 4 + 4
	FlowKeyBinaryLenV6 = 6 + 16 + 16
)

// SrcAddr returns the source address (4-byte form for IPv4).
func (k FlowKey) SrcAddr() netip.Addr { return k.addr(&k.Src) }

// DstAddr returns the destination address (4-byte form for IPv4).
func (k FlowKey) DstAddr() netip.Addr { return k.addr(&k.Dst) }

func (k FlowKey) addr(a *[16]byte) netip.Addr {
	if k.V6 {
		return netip.AddrFrom16(*a)
	}
	return netip.AddrFrom4([4]byte{a[0], a[1], a[2], a[3]})
}

// String renders the key as "proto src:sport > dst:dport".
func (k FlowKey) String() string {
	s, d := k.SrcAddr(), k.DstAddr()
	return strconv.Itoa(int(k.Proto)) + " " +
		netip.AddrPortFrom(s, k.SPort).String() + " > " + netip.AddrPortFrom(d, k.DPort).String()
}

// AppendBinary appends the key's wire form (hash version 1, also the input
// of FlowHash):
//
//	byte 0    family: 4 or 6
//	byte 1    protocol
//	bytes 2-3 SPort, big endian
//	bytes 4-5 DPort, big endian
//	then Src and Dst: 4 bytes each for IPv4, 16 each for IPv6
func (k FlowKey) AppendBinary(b []byte) []byte {
	fam := byte(4)
	n := 4
	if k.V6 {
		fam, n = 6, 16
	}
	b = append(b, fam, k.Proto, byte(k.SPort>>8), byte(k.SPort), byte(k.DPort>>8), byte(k.DPort))
	b = append(b, k.Src[:n]...)
	return append(b, k.Dst[:n]...)
}

// FlowKeyFromBinary decodes AppendBinary's output; b must hold exactly one key.
func FlowKeyFromBinary(b []byte) (FlowKey, error) {
	var k FlowKey
	if len(b) < 6 {
		return k, fmt.Errorf("flow key: %d bytes, want %d (IPv4) or %d (IPv6)", len(b), FlowKeyBinaryLenV4, FlowKeyBinaryLenV6)
	}
	n := 0
	switch b[0] {
	case 4:
		n = 4
	case 6:
		n, k.V6 = 16, true
	default:
		return k, fmt.Errorf("flow key: family byte %d is neither 4 nor 6", b[0])
	}
	if len(b) != 6+2*n {
		return k, fmt.Errorf("flow key: %d bytes for an IPv%d key, want %d", len(b), b[0], 6+2*n)
	}
	k.Proto = b[1]
	k.SPort = binary.BigEndian.Uint16(b[2:])
	k.DPort = binary.BigEndian.Uint16(b[4:])
	copy(k.Src[:], b[6:6+n])
	copy(k.Dst[:], b[6+n:6+2*n])
	return k, nil
}

// FlowKeyFromAddrs builds a key from addresses (IPv4-mapped IPv6 addresses
// are unmapped); both addresses must be of the same family.
func FlowKeyFromAddrs(src, dst netip.Addr, proto uint8, sport, dport uint16) (FlowKey, error) {
	src, dst = src.Unmap(), dst.Unmap()
	if !src.IsValid() || !dst.IsValid() {
		return FlowKey{}, errors.New("flow key: invalid address")
	}
	if src.Is4() != dst.Is4() {
		return FlowKey{}, fmt.Errorf("flow key: %s and %s are of different families", src, dst)
	}
	k := FlowKey{Proto: proto, SPort: sport, DPort: dport, V6: src.Is6()}
	if k.V6 {
		k.Src, k.Dst = src.As16(), dst.As16()
	} else {
		s, d := src.As4(), dst.As4()
		copy(k.Src[:], s[:])
		copy(k.Dst[:], d[:])
	}
	return k, nil
}

// ParseFlowKey builds a key from the text forms of the addresses (as
// FlowKeyFromAddrs: IPv4-mapped addresses are unmapped, both must be of
// one family).
func ParseFlowKey(src, dst string, proto uint8, sport, dport uint16) (FlowKey, error) {
	s, err := netip.ParseAddr(src)
	if err != nil {
		return FlowKey{}, fmt.Errorf("flow key: src: %w", err)
	}
	d, err := netip.ParseAddr(dst)
	if err != nil {
		return FlowKey{}, fmt.Errorf("flow key: dst: %w", err)
	}
	return FlowKeyFromAddrs(s, d, proto, sport, dport)
}

// MustParseFlowKey is ParseFlowKey for keys known to be valid (tests,
// constants); it panics on an error.
func MustParseFlowKey(src, dst string, proto uint8, sport, dport uint16) FlowKey {
	k, err := ParseFlowKey(src, dst, proto, sport, dport)
	if err != nil {
		panic(err)
	}
	return k
}

// AppendSrc appends the text form of the source address (as
// netip.Addr.String, without allocating).
func (k FlowKey) AppendSrc(b []byte) []byte { return k.SrcAddr().AppendTo(b) }

// AppendDst appends the text form of the destination address.
func (k FlowKey) AppendDst(b []byte) []byte { return k.DstAddr().AppendTo(b) }

// CompareText orders keys as their text forms do: source address text,
// then destination address text, then protocol, source and destination
// port. It is the order of the records in the results API and of ties
// among tracked flows: the order the addresses' text gives.
func CompareText(a, b FlowKey) int {
	if c := compareAddrText(a, b, &a.Src, &b.Src); c != 0 {
		return c
	}
	if c := compareAddrText(a, b, &a.Dst, &b.Dst); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.SPort, b.SPort), cmp.Compare(a.DPort, b.DPort))
}

func compareAddrText(a, b FlowKey, x, y *[16]byte) int {
	if a.V6 == b.V6 && *x == *y {
		return 0
	}
	var bx, by [48]byte
	return bytes.Compare(a.addr(x).AppendTo(bx[:0]), b.addr(y).AppendTo(by[:0]))
}
