package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
)

// Binary form of LostAnswer.packets (version 1), little-endian:
//
//	"LA" 1              magic, format version
//	uvarint n           packets
//	n times:
//	  8 bytes           packet hash
//	  uvarint           capture time at tap A minus the interval's start, ns
//	  1 byte            ID kind (capture.IDKind: 0 none, 1 IPv4 id, 2 TCP seq)
//	  uvarint           the packet's identifier
//	  flow key          capture.FlowKey.AppendBinary (14 bytes IPv4, 38 IPv6)
//
// About 26 bytes a packet on an IPv4 link.
const lostAnswerMagic = "LA"

const lostAnswerVersion = 1

// MaxLostAnswerBytes bounds the encoding of an answer of n packets.
func MaxLostAnswerBytes(n int) int {
	return len(lostAnswerMagic) + 1 + binary.MaxVarintLen64 + n*(8+binary.MaxVarintLen64+1+binary.MaxVarintLen32+capture.FlowKeyBinaryLenV6)
}

// AppendLostAnswer appends the encoding of ps, packets of the interval
// starting at start (ns), to b.
func AppendLostAnswer(b []byte, start int64, ps []interval.LoggedPacket) []byte {
	b = append(b, lostAnswerMagic...)
	b = append(b, lostAnswerVersion)
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for i := range ps {
		p := &ps[i]
		b = binary.LittleEndian.AppendUint64(b, p.Hash)
		b = binary.AppendUvarint(b, uint64(p.SentNS-start))
		b = append(b, byte(p.IDKind))
		b = binary.AppendUvarint(b, uint64(p.ID))
		b = p.Key.AppendBinary(b)
	}
	return b
}

// DecodeLostAnswer decodes an answer to the question asked (the hashes
// the receiver sent, at most lost.capacity) about the interval [start,
// start+t). It accepts only packets whose hash was asked, once each, sent
// inside the interval, with a known ID kind and a valid flow key; it
// allocates at most len(asked) packets whatever the input.
func DecodeLostAnswer(b []byte, asked map[uint64]bool, start, t int64) ([]interval.LoggedPacket, error) {
	d := &decoder{b: b}
	if len(b) < len(lostAnswerMagic)+1 || string(b[:len(lostAnswerMagic)]) != lostAnswerMagic {
		return nil, errors.New("lost answer: bad magic")
	}
	d.off = len(lostAnswerMagic)
	if v := d.byte1(); d.err == nil && v != lostAnswerVersion {
		return nil, fmt.Errorf("lost answer: format version %d, this build reads %d: run the same lds version at both ends", v, lostAnswerVersion)
	}
	n := d.uvarint()
	if d.err != nil {
		return nil, fmt.Errorf("lost answer: %w", d.err)
	}
	if n > uint64(len(asked)) {
		return nil, fmt.Errorf("lost answer: %d packets, but %d were asked", n, len(asked))
	}
	out := make([]interval.LoggedPacket, 0, n)
	seen := make(map[uint64]bool, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var p interval.LoggedPacket
		p.Hash = d.u64()
		off := d.uvarint()
		kind := d.byte1()
		id := d.uvarint()
		key := d.key()
		if d.err != nil {
			break
		}
		switch {
		case !asked[p.Hash] || seen[p.Hash]:
			return nil, fmt.Errorf("lost answer: packet %d: hash %016x was not asked (or is answered twice)", i, p.Hash)
		case off >= uint64(t):
			return nil, fmt.Errorf("lost answer: packet %d: sent %d ns after the interval's start, beyond its %d ns", i, off, t)
		case kind > byte(capture.IDTCPSeq) || id > 0xffffffff || (kind == byte(capture.IDNone) && id != 0):
			return nil, fmt.Errorf("lost answer: packet %d: ID kind %d with identifier %d", i, kind, id)
		}
		seen[p.Hash] = true
		p.SentNS, p.IDKind, p.ID, p.Key = start+int64(off), capture.IDKind(kind), uint32(id), key
		out = append(out, p)
	}
	if d.err != nil {
		return nil, fmt.Errorf("lost answer: %w", d.err)
	}
	if d.off != len(d.b) {
		return nil, fmt.Errorf("lost answer: %d trailing bytes", len(d.b)-d.off)
	}
	return out, nil
}

// decoder reads the answer's fields; the first error sticks.
type decoder struct {
	b   []byte
	off int
	err error
}

var errShort = errors.New("truncated")

func (d *decoder) byte1() byte {
	if d.err != nil || d.off >= len(d.b) {
		d.err = errShort
		return 0
	}
	d.off++
	return d.b[d.off-1]
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b)-d.off < 8 {
		d.err = errShort
		return 0
	}
	d.off += 8
	return binary.LittleEndian.Uint64(d.b[d.off-8:])
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) key() capture.FlowKey {
	if d.err != nil || d.off >= len(d.b) {
		d.err = errShort
		return capture.FlowKey{}
	}
	l := capture.FlowKeyBinaryLenV4
	if d.b[d.off] == 6 {
		l = capture.FlowKeyBinaryLenV6
	}
	if len(d.b)-d.off < l {
		d.err = errShort
		return capture.FlowKey{}
	}
	k, err := capture.FlowKeyFromBinary(d.b[d.off : d.off+l])
	if err != nil {
		d.err = err
		return k
	}
	d.off += l
	return k
}
