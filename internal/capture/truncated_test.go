package capture

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// TestTruncatedLastRecord: a capture whose last record is cut short (a
// capture stopped mid-write) is read up to the cut: every complete record
// is delivered, then a *TruncatedError that is an io.EOF names the cut
// record; pcap and pcapng, cut anywhere inside the last record.
func TestTruncatedLastRecord(t *testing.T) {
	var frames [][]byte
	var ts []int64
	for i, b := range randomPackets(20, 7) {
		frames = append(frames, b.frame(t))
		ts = append(ts, int64(i)*1000)
	}
	for _, ng := range []bool{false, true} {
		full := filepath.Join(t.TempDir(), "full")
		writePcap(t, full, frames, ts, layers.LinkTypeEthernet, ng)
		b, err := os.ReadFile(full)
		if err != nil {
			t.Fatal(err)
		}
		last := len(frames[len(frames)-1])
		for _, cut := range []int{1, 8, 16, 17, last / 2, last + 7} {
			path := filepath.Join(t.TempDir(), "cut")
			if err := os.WriteFile(path, b[:len(b)-cut], 0o600); err != nil {
				t.Fatal(err)
			}
			n := 0
			err := EachPacket(path, testParser(t, nil), func(*Packet) bool { n++; return true })
			var te *TruncatedError
			if !errors.As(err, &te) || !errors.Is(err, io.EOF) {
				t.Fatalf("pcapng %v, cut %d bytes: %v, want a TruncatedError", ng, cut, err)
			}
			if n != len(frames)-1 || te.Record != len(frames) {
				t.Errorf("pcapng %v, cut %d bytes: %d packets read, truncated record %d; want %d and %d (%v)", ng, cut, n, te.Record, len(frames)-1, len(frames), te)
			}
		}
		n := 0
		if err := EachPacket(full, testParser(t, nil), func(*Packet) bool { n++; return true }); err != nil || n != len(frames) {
			t.Errorf("pcapng %v, whole file: %d packets, %v", ng, n, err)
		}
	}
}
