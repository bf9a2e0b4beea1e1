package testutil

import (
	"errors"
	"io"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// PcapRecord is one record of a capture file being rewritten.
type PcapRecord struct {
	Index int // from 0, in file order
	CI    gopacket.CaptureInfo
	Data  []byte
	Link  layers.LinkType // the file's
}

// RewritePcap reads the pcap file in and writes the pcap files outs
// (nanosecond timestamps, in's link type, snap length snap or, 0, in's).
// For each record of in, each gets it and a write function that appends
// a record to outs[out]; what it does not write is left out.
func RewritePcap(t testing.TB, in string, outs []string, snap uint32,
	each func(rec PcapRecord, write func(out int, ci gopacket.CaptureInfo, data []byte))) {
	t.Helper()
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if snap == 0 {
		snap = r.Snaplen()
	}
	ws := make([]*pcapgo.Writer, len(outs))
	for i, o := range outs {
		of, err := os.Create(o)
		if err != nil {
			t.Fatal(err)
		}
		defer of.Close()
		ws[i] = pcapgo.NewWriterNanos(of)
		if err := ws[i].WriteFileHeader(snap, r.LinkType()); err != nil {
			t.Fatal(err)
		}
	}
	write := func(out int, ci gopacket.CaptureInfo, data []byte) {
		if err := ws[out].WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; ; i++ {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		each(PcapRecord{Index: i, CI: ci, Data: data, Link: r.LinkType()}, write)
	}
}
