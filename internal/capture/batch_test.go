package capture

import (
	"errors"
	"io"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// blockSource plays frames in blocks: Buffered is what is left of the
// current block; a frame listed in bad fails to read (a corrupt ring), one
// listed in skip does not parse.
type blockSource struct {
	frame, junk []byte
	blocks      []int
	bad, skip   map[int]bool
	i           int // frames read
}

var errRing = errors.New("ring corrupted")

func (s *blockSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	for len(s.blocks) > 0 && s.blocks[0] == 0 {
		s.blocks = s.blocks[1:]
	}
	if len(s.blocks) == 0 {
		return nil, 0, 0, io.EOF
	}
	i := s.i
	if s.bad[i] {
		delete(s.bad, i)
		return nil, 0, 0, errRing
	}
	s.i++
	s.blocks[0]--
	if s.skip[i] {
		return s.junk, int64(i), len(s.junk), nil
	}
	return s.frame, int64(i), len(s.frame), nil
}

func (s *blockSource) Buffered() int {
	if len(s.blocks) == 0 {
		return 0
	}
	return s.blocks[0]
}
func (s *blockSource) LinkType() layers.LinkType { return layers.LinkTypeEthernet }
func (s *blockSource) Stats() (DropStats, error) { return DropStats{}, nil }
func (s *blockSource) Close() error              { return nil }

// TestNextBatch: a batch takes what the block holds and no more, skips
// frames that do not parse, and an error met while reading ahead comes
// with the next call, after the packets read before it.
func TestNextBatch(t *testing.T) {
	frame := pk{src: "10.0.0.1", dst: "10.0.0.2", proto: "udp", sport: 1, dport: 2, payload: seqBytes(40, 0)}.frame(t)
	for _, tc := range []struct {
		name   string
		src    *blockSource
		calls  []int   // packets each call returns
		errs   []error // each call's error
		packet []int64 // the frames returned, in order
	}{
		{"blocks", &blockSource{blocks: []int{5, 3}}, []int{4, 1, 3, 0}, []error{nil, nil, nil, io.EOF}, []int64{0, 1, 2, 3, 4, 5, 6, 7}},
		{"junk skipped", &blockSource{blocks: []int{5}, skip: map[int]bool{1: true, 3: true}}, []int{3, 0}, []error{nil, io.EOF}, []int64{0, 2, 4}},
		{"error ahead", &blockSource{blocks: []int{6}, bad: map[int]bool{2: true}}, []int{2, 0, 4, 0}, []error{nil, errRing, nil, io.EOF}, []int64{0, 1, 2, 3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.src.frame, tc.src.junk = frame, []byte{1, 2, 3}
			r := NewReader(tc.src, testParser(t, nil))
			var got []int64
			buf := make([]Packet, 4)
			for i, want := range tc.calls {
				n, err := r.NextBatch(buf)
				if n != want || !errors.Is(err, tc.errs[i]) {
					t.Fatalf("call %d: %d packets, %v; want %d, %v", i, n, err, want, tc.errs[i])
				}
				for _, p := range buf[:n] {
					got = append(got, p.TS)
				}
			}
			if len(got) != len(tc.packet) {
				t.Fatalf("frames %v, want %v", got, tc.packet)
			}
			for i := range got {
				if got[i] != tc.packet[i] {
					t.Fatalf("frames %v, want %v", got, tc.packet)
				}
			}
		})
	}
}
