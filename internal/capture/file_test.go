package capture

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/lds-net/lds/test/testutil"
)

// randomPackets makes a reproducible mix of flows and packet kinds.
func randomPackets(n int, seed uint64) []pk {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []pk
	for len(out) < n {
		b := pk{ttl: 64, id: uint16(r.IntN(65536)), df: r.IntN(2) == 0, window: uint16(r.IntN(65536)),
			seq: r.Uint32(), ack: r.Uint32(), psh: true, sport: uint16(1024 + r.IntN(60000)), dport: uint16(1 + r.IntN(1024))}
		b.payload = make([]byte, r.IntN(200))
		for i := range b.payload {
			b.payload[i] = byte(r.IntN(256))
		}
		if r.IntN(3) == 0 {
			b.v6 = true
			b.src = fmt.Sprintf("2001:db8::%x", 1+r.IntN(8))
			b.dst = fmt.Sprintf("2001:db8:1::%x", 1+r.IntN(8))
		} else {
			b.src = fmt.Sprintf("10.0.0.%d", 1+r.IntN(8))
			b.dst = fmt.Sprintf("10.1.0.%d", 1+r.IntN(8))
		}
		switch k := r.IntN(10); {
		case k < 6:
			b.proto = "tcp"
		case k < 8:
			b.proto = "udp"
		case k < 9:
			b.proto = "icmp"
			b.icmpType, b.icmpID, b.icmpSeq = 8, uint16(r.IntN(100)), uint16(len(out))
			if b.v6 {
				b.icmpType = 128
			}
		default:
			if !b.v6 && len(b.payload) > 12 {
				f1, f2 := fragPair(b)
				out = append(out, f1, f2)
				continue
			}
			b.proto = "udp"
		}
		out = append(out, b)
	}
	return out[:n]
}

// hopped is what the downstream tap sees: TTL down, DSCP remarked, ECN CE,
// VLANs changed, MACs rewritten, L4 checksum different, padding.
func hopped(b pk, i int) pk {
	b.ttl--
	b.tos = 0x28 | 3
	b.vlans = [][]uint16{nil, {300}, {10, 20}}[i%3]
	b.srcMAC, b.dstMAC = 0xaa, 0xbb
	b.csumXor = uint16(i | 1)
	b.padTo, b.padByte = 60, 0x5a
	b.label = uint32(i)
	return b
}

func writePcapTB(t testing.TB, path string, frames [][]byte, ts []int64) {
	writePcap(t, path, frames, ts, layers.LinkTypeEthernet, false)
}

func writePcap(t testing.TB, path string, frames [][]byte, ts []int64, link layers.LinkType, ng bool) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var write func(gopacket.CaptureInfo, []byte) error
	flush := func() error { return nil }
	if ng {
		w, err := pcapgo.NewNgWriter(f, link)
		if err != nil {
			t.Fatal(err)
		}
		write, flush = w.WritePacket, w.Flush
	} else {
		w := pcapgo.NewWriterNanos(f)
		if err := w.WriteFileHeader(65535, link); err != nil {
			t.Fatal(err)
		}
		write = w.WritePacket
	}
	for i, d := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, ts[i]), CaptureLength: len(d), Length: len(d)}
		if err := write(ci, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := flush(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, path string, p *Parser) []Packet {
	t.Helper()
	src, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := CheckSnaplen(src, IdentityConfig{PayloadBytes: 32}); err != nil {
		t.Fatal(err)
	}
	r := NewReader(src, p)
	var out []Packet
	for {
		var pkt Packet
		err := r.Next(&pkt)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pkt)
	}
}

// TestCapturePair writes the two taps' captures (pcap/Ethernet and
// pcapng/raw IP after a hop) and reads both back through the file source.
func TestCapturePair(t *testing.T) {
	const n = 400
	const delay = 123457 // ns, on purpose not a multiple of 1000
	pkts := randomPackets(n, 7)
	var fa, fb, fc [][]byte
	var ta, tb []int64
	t0 := time.Date(2025, 11, 13, 2, 13, 20, 0, time.UTC).UnixNano()
	for i, b := range pkts {
		fa = append(fa, withVLAN(b).frame(t))
		h := hopped(b, i)
		fb = append(fb, h.ipPacket(t))
		fc = append(fc, h.frame(t))
		ta = append(ta, t0+int64(i)*1_000_003)
		tb = append(tb, t0+int64(i)*1_000_003+delay)
	}
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcapng"), filepath.Join(dir, "c.pcapng")
	writePcap(t, a, fa, ta, layers.LinkTypeEthernet, false)
	writePcap(t, b, fb, tb, layers.LinkTypeRaw, true)
	writePcap(t, c, fc, tb, layers.LinkTypeEthernet, true)
	pa, pb, pc := testParser(t, nil), testParser(t, nil), testParser(t, nil)
	ra, rb, rc := readAll(t, a, pa), readAll(t, b, pb), readAll(t, c, pc)
	if len(ra) != n || len(rb) != n || len(rc) != n {
		t.Fatalf("read %d / %d / %d packets, want %d each (counters %+v / %+v)", len(ra), len(rb), len(rc), n, pa.Counters(), pb.Counters())
	}
	spec := testParser(t, nil)
	for i := range ra {
		x, y, z := ra[i], rb[i], rc[i]
		if x.PktHash != y.PktHash || x.Key != y.Key || x.FlowHash != y.FlowHash || y.PktHash != z.PktHash {
			t.Errorf("packet %d: tap A %v/%x, tap B %v/%x, tap B' %x", i, x.Key, x.PktHash, y.Key, y.PktHash, z.PktHash)
		}
		if x.TS != ta[i] || y.TS != tb[i] || y.TS-x.TS != delay {
			t.Errorf("packet %d: timestamps %d %d, want %d %d (nanoseconds kept)", i, x.TS, y.TS, ta[i], tb[i])
		}
		if x.WireLen != uint32(len(fa[i])) || y.WireLen != uint32(len(fb[i])) {
			t.Errorf("packet %d: wire lengths %d %d, want %d %d", i, x.WireLen, y.WireLen, len(fa[i]), len(fb[i]))
		}
		// Ground truth: the identity of the packet as sent (no L2 at all).
		want, r := spec.Identify(pkts[i].ipPacket(t), 0, layers.LinkTypeRaw)
		if r != ReasonOK || want.PktHash != x.PktHash {
			t.Errorf("packet %d: file identity differs from the packet's own (%v)", i, r)
		}
	}
	seen := map[uint64]bool{}
	for _, x := range ra {
		if seen[x.PktHash] {
			t.Errorf("distinct packets share hash %x", x.PktHash)
		}
		seen[x.PktHash] = true
	}
}

func TestFileErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("this is not a capture file at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(junk); err == nil {
		t.Error("junk opened")
	}
	if _, err := OpenFile(filepath.Join(dir, "missing.pcap")); err == nil {
		t.Error("missing file opened")
	}
	// A file whose snap length cannot hold the link header + ip_bytes is
	// refused at start; tcpdump -s 96 on Ethernet holds the default.
	for _, tc := range []struct {
		snap int
		lt   layers.LinkType
		ok   bool
	}{{96, layers.LinkTypeEthernet, true}, {95, layers.LinkTypeEthernet, false}, {64, layers.LinkTypeEthernet, false},
		{82, layers.LinkTypeRaw, true}, {97, layers.LinkTypeLinuxSLL, false}, {98, layers.LinkTypeLinuxSLL, true}} {
		short := filepath.Join(dir, fmt.Sprintf("short-%d-%d.pcap", tc.snap, tc.lt))
		f, err := os.Create(short)
		if err != nil {
			t.Fatal(err)
		}
		w := pcapgo.NewWriterNanos(f)
		if err := errors.Join(w.WriteFileHeader(uint32(tc.snap), tc.lt), f.Close()); err != nil {
			t.Fatal(err)
		}
		src, err := OpenFile(short)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckSnaplen(src, DefaultConfig().Identity)
		src.Close()
		if (err == nil) != tc.ok {
			t.Errorf("snap length %d on %v: %v, want accepted %v", tc.snap, tc.lt, err, tc.ok)
		}
	}
	// Tagged frames: the check reads the link header off the first frames.
	base := basePackets()["v4-tcp"]
	for _, tc := range []struct {
		vlans []uint16
		snap  int
		ok    bool
	}{{nil, 96, true}, {[]uint16{100}, 96, false}, {[]uint16{100}, 100, true}, {[]uint16{5, 6}, 100, false}, {[]uint16{5, 6}, 104, true}} {
		b := base
		b.vlans = tc.vlans
		frame := b.frame(t)
		path := filepath.Join(dir, fmt.Sprintf("tagged-%d-%d.pcap", len(tc.vlans), tc.snap))
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := pcapgo.NewWriterNanos(f)
		if err := errors.Join(w.WriteFileHeader(uint32(tc.snap), layers.LinkTypeEthernet),
			w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: min(len(frame), tc.snap), Length: len(frame)}, frame[:min(len(frame), tc.snap)]),
			f.Close()); err != nil {
			t.Fatal(err)
		}
		src, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckSnaplen(src, DefaultConfig().Identity)
		src.Close()
		if (err == nil) != tc.ok {
			t.Errorf("%d tags, snap length %d: %v, want accepted %v", len(tc.vlans), tc.snap, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("tcpdump -s %d", 96+4*len(tc.vlans))) {
			t.Errorf("%d tags: %v, want the advice tcpdump -s %d", len(tc.vlans), err, 96+4*len(tc.vlans))
		}
	}
}

// randomPcap writes n random packets (randomPackets) as an Ethernet pcap
// in a test directory and returns its path and n.
func randomPcap(t *testing.T, n int, seed uint64) (string, int) {
	t.Helper()
	var frames [][]byte
	var ts []int64
	for i, b := range randomPackets(n, seed) {
		frames = append(frames, b.frame(t))
		ts = append(ts, int64(i))
	}
	path := filepath.Join(t.TempDir(), "x.pcap")
	writePcap(t, path, frames, ts, layers.LinkTypeEthernet, false)
	return path, len(frames)
}

func TestReaderAllocatesNothing(t *testing.T) {
	path, _ := randomPcap(t, 50, 3)
	src, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r := NewReader(src, testParser(t, nil))
	var pkt Packet
	if err := r.Next(&pkt); err != nil { // the first read sizes pcapgo's buffer
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(40, func() {
		if err := r.Next(&pkt); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Reader.Next allocates %.1f per packet, want 0", allocs)
	}
}

// skipUnmapped skips a test of the file mapping whose file was not
// mapped. Files are mapped on Linux only; there an unmapped file is a
// broken mapping, so LDS_E2E_REQUIRED=1 turns the skip into a failure.
func skipUnmapped(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("capture files are mapped on Linux only, not on %s", runtime.GOOS)
	}
	testutil.SkipOrFail(t, "%s", "the capture file was not mapped (mapFile refused it): the mapped read path is untested")
}

// A mapped capture file cut short by another process while it is read
// (a capture ring overwriting its oldest file) ends the read with an error
// that says so: the fault on the vanished pages is not a crash.
func TestMappedFileCutShort(t *testing.T) {
	path, total := randomPcap(t, 3000, 4)
	src, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r := NewReader(src, testParser(t, nil))
	if !r.mapped {
		skipUnmapped(t)
	}
	// Only faults inside the mapping are the file's: a fault elsewhere (a
	// bug) must stay a panic.
	mm := src.(*fileSource).classic.mm
	if !r.inMapping(uintptr(unsafe.Pointer(&mm[100]))) || r.inMapping(8) || r.inMapping(uintptr(unsafe.Pointer(&mm[0]))+uintptr(len(mm))) {
		t.Fatal("inMapping: wrong bounds")
	}
	var pkt Packet
	for range 10 {
		if err := r.Next(&pkt); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	n := 10
	for {
		err := r.Next(&pkt)
		if err == nil {
			n++
			continue
		}
		if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "cut short or overwritten") {
			t.Fatalf("after %d packets: %v, want the cut-short error", n, err)
		}
		break
	}
	if n >= total {
		t.Fatalf("read all %d packets of a file cut to 4096 bytes", n)
	}
}

// Reading a mapped file while handing its pages back (every page here,
// every 8 MiB in use) returns every record as the buffered reader does.
func TestMappedFileDropsPages(t *testing.T) {
	path, total := randomPcap(t, 4000, 5)
	read := func(step int) []Packet {
		src, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		fs := src.(*fileSource)
		if step < 0 {
			unmapFile(fs.classic.mm)
			fs.classic.mm = nil // the buffered reader, from the start of the records
		} else if fs.classic.mm == nil {
			skipUnmapped(t)
		} else {
			fs.classic.dropStep = step
		}
		r := NewReader(src, testParser(t, nil))
		var out []Packet
		for {
			var pkt Packet
			if err := r.Next(&pkt); errors.Is(err, io.EOF) {
				return out
			} else if err != nil {
				t.Fatal(err)
			}
			out = append(out, pkt)
		}
	}
	want := read(-1)
	got := read(os.Getpagesize())
	if len(want) != total || !slices.Equal(got, want) {
		t.Fatalf("mapped with page drops: %d packets, buffered %d (of %d), or they differ", len(got), len(want), total)
	}
}
