package capture

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
)

// classicFile builds a pcap file by hand: the given byte order and
// resolution, snap length 65535, Ethernet, and n random records (capture
// length up to the original, some empty).
func classicFile(order binary.AppendByteOrder, nanos bool, n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 2))
	magic := uint32(0xa1b2c3d4)
	if nanos {
		magic = 0xa1b23c4d
	}
	var b []byte
	b = order.AppendUint32(b, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, 65535)
	b = order.AppendUint32(b, 1)
	for range n {
		orig := rng.IntN(1600)
		incl := orig
		if rng.IntN(3) == 0 {
			incl = rng.IntN(orig + 1)
		}
		frac := rng.Uint32N(1_000_000)
		if nanos {
			frac = rng.Uint32N(1_000_000_000)
		}
		b = order.AppendUint32(b, 1_763_000_000+rng.Uint32N(1000))
		b = order.AppendUint32(b, frac)
		b = order.AppendUint32(b, uint32(incl))
		b = order.AppendUint32(b, uint32(orig))
		for range incl {
			b = append(b, byte(rng.Uint32()))
		}
	}
	return b
}

type rec struct {
	data     []byte
	ts       int64
	orig     int
	err      bool
	finalEOF bool
}

// readBoth reads a pcap byte stream with the classic reader and with
// pcapgo (the reference), record by record, up to the first error of
// either.
func readBoth(t testing.TB, b []byte) (got, want []rec) {
	order, nanos, ok := pcapMagic(b[:min(4, len(b))])
	if !ok {
		t.Fatalf("not a pcap magic: % x", b[:4])
	}
	br := bufio.NewReaderSize(bytes.NewReader(b), 1<<20)
	hdr, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, nil
	}
	maxCap := max(int(hdr.Snaplen()), minRecordCap)
	readAllRecs := func(c *classicReader) (out []rec) {
		for {
			data, ts, orig, err := c.next()
			if err != nil {
				var te *TruncatedError
				return append(out, rec{err: true, finalEOF: errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &te)})
			}
			out = append(out, rec{data: bytes.Clone(data), ts: ts, orig: orig})
		}
	}
	got = readAllRecs(&classicReader{br: br, order: order, nanos: nanos, maxCap: maxCap})
	// The same bytes as a mapped file must read the same, errors included.
	mapped := readAllRecs(&classicReader{mm: b, off: pcapFileHeader, order: order, nanos: nanos, maxCap: maxCap})
	sameRecords(t, mapped, got)
	ref, _ := pcapgo.NewReader(bytes.NewReader(b))
	consumed := 24
	for {
		data, ci, err := ref.ZeroCopyReadPacketData()
		if err != nil {
			// pcapgo takes a file that stops right after a record header
			// for a clean end; bytes left over are a truncated record,
			// which the classic reader reports (nothing silently dropped).
			want = append(want, rec{err: true, finalEOF: errors.Is(err, io.EOF) && consumed == len(b)})
			break
		}
		// A timestamp fraction of a second or more is corrupt: pcapgo
		// wraps it into the seconds, the classic reader refuses it.
		if frac := int64(order.Uint32(b[consumed+4:])); (nanos && frac >= 1e9) || (!nanos && frac >= 1e6) {
			want = append(want, rec{err: true})
			break
		}
		consumed += 16 + len(data)
		want = append(want, rec{data: bytes.Clone(data), ts: ci.Timestamp.UnixNano(), orig: ci.Length})
	}
	return got, want
}

func sameRecords(t testing.TB, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records (last %+v), pcapgo reads %d (last %+v)", len(got), got[len(got)-1], len(want), want[len(want)-1])
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.err != w.err || g.finalEOF != w.finalEOF || g.ts != w.ts || g.orig != w.orig || !bytes.Equal(g.data, w.data) {
			t.Fatalf("record %d: got ts %d orig %d %d bytes err %v eof %v; pcapgo ts %d orig %d %d bytes err %v eof %v",
				i, g.ts, g.orig, len(g.data), g.err, g.finalEOF, w.ts, w.orig, len(w.data), w.err, w.finalEOF)
		}
	}
}

// TestClassicReaderMatchesPcapgo: the in-place record reader returns
// exactly what pcapgo returns (data, timestamp, original length), for both
// byte orders and both resolutions, and fails where pcapgo fails on every
// truncation of the file.
func TestClassicReaderMatchesPcapgo(t *testing.T) {
	for _, c := range []struct {
		name  string
		order binary.AppendByteOrder
		nanos bool
	}{{"le-us", binary.LittleEndian, false}, {"le-ns", binary.LittleEndian, true}, {"be-us", binary.BigEndian, false}, {"be-ns", binary.BigEndian, true}} {
		t.Run(c.name, func(t *testing.T) {
			b := classicFile(c.order, c.nanos, 3000, 9)
			got, want := readBoth(t, b)
			if len(got) != 3001 || !got[3000].finalEOF {
				t.Fatalf("read %d records, last %+v: want 3000 and a clean EOF", len(got)-1, got[len(got)-1])
			}
			sameRecords(t, got, want)
			small := classicFile(c.order, c.nanos, 4, 10)
			for cut := 24; cut < len(small); cut++ {
				got, want := readBoth(t, small[:cut])
				sameRecords(t, got, want)
			}
		})
	}
}

// TestClassicReaderRefuses: a record longer than any snap length, or
// longer than its packet, is an error naming the record, as with pcapgo.
func TestClassicReaderRefuses(t *testing.T) {
	for name, edit := range map[string]func(b []byte){
		"capture beyond snap length": func(b []byte) { binary.LittleEndian.PutUint32(b[24+8:], 1<<30) },
		"capture beyond original":    func(b []byte) { binary.LittleEndian.PutUint32(b[24+12:], 0) },
	} {
		b := classicFile(binary.LittleEndian, true, 5, 11)
		for binary.LittleEndian.Uint32(b[24+8:]) == 0 { // the first record must carry bytes
			b = classicFile(binary.LittleEndian, true, 5, uint64(len(b)))
		}
		edit(b)
		got, want := readBoth(t, b)
		if len(got) != 1 || !got[0].err || got[0].finalEOF {
			t.Fatalf("%s: %+v, want an error on the first record", name, got)
		}
		sameRecords(t, got, want)
	}
}

// TestOpenFileUsesClassicReader: a pcap file goes through the in-place
// reader (pcapng does not), end to end through OpenFile.
func TestOpenFileUsesClassicReader(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.pcap")
	if err := os.WriteFile(p, classicFile(binary.BigEndian, false, 100, 12), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if fs, ok := src.(*fileSource); !ok || fs.classic == nil {
		t.Fatalf("pcap file not read by the classic reader: %T", src)
	}
	n := 0
	for {
		_, _, _, err := src.ReadPacket(nil)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 100 {
		t.Fatalf("read %d of 100 records", n)
	}
}

// FuzzClassicReader: on any bytes after a valid header the in-place
// reader and pcapgo agree record by record and fail at the same record.
func FuzzClassicReader(f *testing.F) {
	f.Add(classicFile(binary.LittleEndian, true, 3, 1)[24:])
	f.Add(classicFile(binary.BigEndian, false, 3, 2)[24:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, order := range []binary.AppendByteOrder{binary.LittleEndian, binary.BigEndian} {
			b := append(classicFile(order, len(body)%2 == 0, 0, 0), body...)
			got, want := readBoth(t, b)
			sameRecords(t, got, want)
		}
	})
}
