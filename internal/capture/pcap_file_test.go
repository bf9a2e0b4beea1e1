//go:build pcap

package capture

import (
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// A BPF expression selects the same packets when replaying a file.
func TestFileBPF(t *testing.T) {
	pkts := randomPackets(200, 9)
	var frames [][]byte
	var ts []int64
	wantTCP := 0
	for i, b := range pkts {
		frames = append(frames, b.frame(t))
		ts = append(ts, int64(i))
		if b.protoNum() == 6 {
			wantTCP++
		}
	}
	path := filepath.Join(t.TempDir(), "f.pcap")
	writePcap(t, path, frames, ts, layers.LinkTypeEthernet, false)
	srcs, err := OpenSources(SourceConfig{Kind: "file", File: path, BPF: "tcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srcs[0].Close()
	r := NewReader(srcs[0], testParser(t, nil))
	n := 0
	for {
		var p Packet
		err := r.Next(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Key.Proto != 6 {
			t.Errorf("bpf tcp let through %v", p.Key)
		}
		n++
	}
	if n != wantTCP {
		t.Errorf("%d packets through bpf tcp, want %d", n, wantTCP)
	}
	if _, err := OpenSources(SourceConfig{Kind: "file", File: path, BPF: "tcp and and"}, nil); err == nil {
		t.Error("bad BPF expression accepted")
	}
}
