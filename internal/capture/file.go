package capture

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// fileSource reads pcap or pcapng, keeping nanosecond timestamps where the
// file has them: pcapng and the pcap file header through pcapgo, the
// records of a pcap file by classicReader.
type fileSource struct {
	f       *os.File
	classic *classicReader
	read    func() ([]byte, gopacket.CaptureInfo, error)
	link    layers.LinkType
	links   []layers.LinkType // pcapng: per interface
	snaplen int
	ng      *pcapgo.NgReader
	path    string
	n       int // records read (pcapgo's readers)
}

// pcapng section header block type; pcap magics are checked by pcapgo.
var pcapngMagic = []byte{0x0a, 0x0d, 0x0d, 0x0a}

// TruncatedError ends a capture file whose last record is cut short (the
// common end of a capture stopped mid-write): every complete record before
// it was read; the cut one is dropped. It matches io.EOF (errors.Is), so a
// reader ends there as at a clean end; callers that can warn find it with
// errors.As.
type TruncatedError struct {
	Path       string
	Record     int // the cut record's number (1-based); the ones before it are complete
	Have, Want int // bytes of the cut record present and announced (0, 0: unknown)
}

func (e *TruncatedError) Error() string {
	cut := ""
	if e.Want > 0 {
		cut = fmt.Sprintf(" (%d of its %d bytes present)", e.Have, e.Want)
	}
	return fmt.Sprintf("capture file %s ends inside record %d%s, cut short (a capture stopped mid-write?): the %d complete records before it were used, 1 record dropped",
		e.Path, e.Record, cut, e.Record-1)
}

// Is makes a TruncatedError an io.EOF: the end of the usable records.
func (e *TruncatedError) Is(target error) bool { return target == io.EOF }

// OpenFile opens a pcap or pcapng file, told apart by its magic number.
func OpenFile(path string) (Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("capture: open capture file: %w", err)
	}
	br := bufio.NewReaderSize(f, 1<<20)
	magic, err := br.Peek(4)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("capture: %s: too short to be a pcap or pcapng file: %w", path, err)
	}
	s := &fileSource{f: f, path: path}
	if bytes.Equal(magic, pcapngMagic) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{})
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("capture: %s: reading pcapng header: %w", path, err)
		}
		s.ng, s.read, s.link = ng, ng.ZeroCopyReadPacketData, ng.LinkType()
		for i := range ng.NInterfaces() {
			ifc, _ := ng.Interface(i)
			s.links = append(s.links, ifc.LinkType)
			if sl := int(ifc.SnapLength); sl > 0 && (s.snaplen == 0 || sl < s.snaplen) {
				s.snaplen = sl
			}
		}
		return s, nil
	}
	order, nanos, classic := pcapMagic(magic)
	r, err := pcapgo.NewReader(br)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("capture: %s: neither pcap nor pcapng (magic % x): %w", path, magic, err)
	}
	s.read, s.link, s.snaplen = r.ZeroCopyReadPacketData, r.LinkType(), int(r.Snaplen())
	if maxCap := max(s.snaplen, minRecordCap); classic && maxCap <= br.Size()-pcapRecordHeader {
		s.classic = &classicReader{br: br, order: order, nanos: nanos, maxCap: maxCap, path: path}
		// A regular file is read through a read-only mapping where the
		// system has one: records are then read where the page cache
		// holds them, without the read(2) copy (~7 % of a replay's CPU).
		if mm := mapFile(f); mm != nil {
			s.classic.mm, s.classic.off, s.classic.dropStep = mm, pcapFileHeader, dropEvery
		}
	}
	return s, nil
}

// pcapRecordHeader is the size of a pcap record header; minRecordCap the
// largest record accepted whatever the file's snap length says (pcapgo's
// rule: some writers store more than their snap length).
const (
	pcapFileHeader   = 24
	pcapRecordHeader = 16
	minRecordCap     = 256 << 10
)

// pcapMagic tells the byte order and timestamp resolution of a pcap file
// from its magic number; ok is false for anything else.
func pcapMagic(m []byte) (order binary.ByteOrder, nanos, ok bool) {
	switch {
	case bytes.Equal(m, []byte{0xd4, 0xc3, 0xb2, 0xa1}):
		return binary.LittleEndian, false, true
	case bytes.Equal(m, []byte{0x4d, 0x3c, 0xb2, 0xa1}):
		return binary.LittleEndian, true, true
	case bytes.Equal(m, []byte{0xa1, 0xb2, 0xc3, 0xd4}):
		return binary.BigEndian, false, true
	case bytes.Equal(m, []byte{0xa1, 0xb2, 0x3c, 0x4d}):
		return binary.BigEndian, true, true
	}
	return nil, false, false
}

// classicReader reads the records of a pcap file in place in the buffered
// reader's buffer (Peek, then Discard on the next call): no copy and no
// time.Time per packet, which made pcapgo's record reading ~40 % of a
// replay's capture loop. The data returned is valid until the next call,
// as the Source contract says. Records are checked as pcapgo checks them.
type classicReader struct {
	br      *bufio.Reader
	order   binary.ByteOrder
	nanos   bool
	maxCap  int
	pending int // bytes of the record returned last, discarded on the next call
	n       int // records read
	path    string
	// mm is the whole file when mapped (then br is not used), off the
	// next record's offset in it, dropped how much of it has been handed
	// back (see next).
	mm       []byte
	off      int
	dropped  int
	dropStep int // 0: never (mm is not a file mapping)
}

// dropEvery: a mapped file's pages behind the reader are unmapped from the
// process in steps of this many bytes, so that its resident memory stays
// bounded whatever the file's size (the pages stay in the page cache).
const dropEvery = 8 << 20

// peek returns the next n bytes (fewer at the end of the file, with
// io.EOF as bufio.Reader.Peek does).
func (c *classicReader) peek(n int) ([]byte, error) {
	if c.mm == nil {
		return c.br.Peek(n)
	}
	if rest := len(c.mm) - c.off; rest < n {
		return c.mm[c.off:], io.EOF
	}
	return c.mm[c.off : c.off+n], nil
}

func (c *classicReader) next() ([]byte, int64, int, error) {
	if c.mm != nil {
		c.off += c.pending
		c.pending = 0
		if c.dropStep > 0 && c.off-c.dropped >= c.dropStep {
			// Only what lies before the previous record: its data is
			// valid until this call.
			end := c.off &^ (os.Getpagesize() - 1)
			dropMapped(c.mm[c.dropped:end])
			c.dropped = end
		}
	}
	if c.pending > 0 {
		if _, err := c.br.Discard(c.pending); err != nil {
			return nil, 0, 0, fmt.Errorf("capture: pcap record %d: %w", c.n, err)
		}
		c.pending = 0
	}
	h, err := c.peek(pcapRecordHeader)
	if err != nil {
		if errors.Is(err, io.EOF) && len(h) == 0 {
			return nil, 0, 0, io.EOF
		}
		return nil, 0, 0, &TruncatedError{Path: c.path, Record: c.n + 1, Have: len(h), Want: pcapRecordHeader}
	}
	incl, orig := int(c.order.Uint32(h[8:])), int(c.order.Uint32(h[12:]))
	if incl > c.maxCap {
		return nil, 0, 0, fmt.Errorf("capture: pcap record %d: capture length %d exceeds the snap length (largest accepted %d): the file is corrupt or not what its header says", c.n+1, incl, c.maxCap)
	}
	if incl > orig {
		return nil, 0, 0, fmt.Errorf("capture: pcap record %d: capture length %d exceeds the original packet length %d: the file is corrupt", c.n+1, incl, orig)
	}
	rec, err := c.peek(pcapRecordHeader + incl)
	if err != nil {
		return nil, 0, 0, &TruncatedError{Path: c.path, Record: c.n + 1, Have: len(rec), Want: pcapRecordHeader + incl}
	}
	frac := int64(c.order.Uint32(rec[4:]))
	if !c.nanos {
		frac *= 1000
	}
	if frac >= 1e9 {
		return nil, 0, 0, fmt.Errorf("capture: pcap record %d: timestamp fraction %d is not below one second: the file is corrupt or not what its header says", c.n+1, c.order.Uint32(rec[4:]))
	}
	ts := int64(c.order.Uint32(rec[0:]))*1e9 + frac
	c.pending = pcapRecordHeader + incl
	c.n++
	return rec[pcapRecordHeader:c.pending:c.pending], ts, orig, nil
}

func (s *fileSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	if s.classic != nil {
		return s.classic.next()
	}
	data, ci, err := s.read()
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, 0, &TruncatedError{Path: s.path, Record: s.n + 1}
		}
		return nil, 0, 0, err
	}
	s.n++
	if s.ng != nil {
		if ci.InterfaceIndex >= len(s.links) {
			s.refreshLinks()
		}
		if ci.InterfaceIndex < len(s.links) {
			s.link = s.links[ci.InterfaceIndex]
		}
	}
	return data, ci.Timestamp.UnixNano(), ci.Length, nil
}

// refreshLinks picks up interfaces described after the first packet.
func (s *fileSource) refreshLinks() {
	for i := len(s.links); i < s.ng.NInterfaces(); i++ {
		ifc, _ := s.ng.Interface(i)
		s.links = append(s.links, ifc.LinkType)
	}
}

func (s *fileSource) LinkType() layers.LinkType { return s.link }
func (s *fileSource) Snaplen() int              { return s.snaplen }
func (s *fileSource) Stats() (DropStats, error) { return DropStats{}, nil }

// Close unmaps the file: data returned by ReadPacket is invalid after it.
func (s *fileSource) Close() error {
	if s.classic != nil && s.classic.mm != nil {
		unmapFile(s.classic.mm)
		s.classic.mm = nil
	}
	return s.f.Close()
}

// Path is the file's path.
func (s *fileSource) Path() string { return s.path }
