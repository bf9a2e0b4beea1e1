package capture

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// fileSource reads pcap or pcapng through pcapgo, keeping nanosecond
// timestamps where the file has them.
type fileSource struct {
	f       *os.File
	read    func() ([]byte, gopacket.CaptureInfo, error)
	link    layers.LinkType
	links   []layers.LinkType // pcapng: per interface
	snaplen int
	ng      *pcapgo.NgReader
}

// pcapng section header block type; pcap magics are checked by pcapgo.
var pcapngMagic = []byte{0x0a, 0x0d, 0x0d, 0x0a}

// OpenFile opens a pcap or pcapng file, told apart by its magic number.
func OpenFile(path string) (Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("capture: open capture file: %w", err)
	}
	br := bufio.NewReaderSize(f, 1<<20)
	magic, err := br.Peek(4)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("capture: %s: too short to be a pcap or pcapng file: %w", path, err)
	}
	s := &fileSource{f: f}
	if bytes.Equal(magic, pcapngMagic) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{})
		if err != nil {
			f.Close()
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
	r, err := pcapgo.NewReader(br)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("capture: %s: neither pcap nor pcapng (magic % x): %w", path, magic, err)
	}
	s.read, s.link, s.snaplen = r.ZeroCopyReadPacketData, r.LinkType(), int(r.Snaplen())
	return s, nil
}

func (s *fileSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	data, ci, err := s.read()
	if err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, 0, 0, fmt.Errorf("capture: capture file ends inside a packet (cut short?): %w", err)
		}
		return nil, 0, 0, err
	}
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
func (s *fileSource) Close() error              { return s.f.Close() }
