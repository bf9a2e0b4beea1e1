//go:build linux

package capture

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/test/testutil"
)

// TestLiveSnapMatchesTcpdump captures the same frames with a live source
// at its default snap length and with tcpdump keeping whole frames
// (-s 0) on the same interface: frames of 60 to 1514 bytes, some with one
// or two VLAN tags, IPv4 and IPv6, fragments. Every packet gets the same
// flow key, flow hash, packet hash and timestamp from the cut frame as
// from tcpdump's whole one, so the parse sees every byte identity reads,
// and its wire length is the frame's, with the outer VLAN tag the kernel
// takes off before a packet socket sees the frame (libpcap puts it back
// for tcpdump; kind afpacket adds its 4 bytes to the length).
func TestLiveSnapMatchesTcpdump(t *testing.T) {
	kinds := []string{"afpacket"}
	if pcapBuilt {
		kinds = append(kinds, "pcap")
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) { snapMatchesTcpdump(t, kind) })
	}
}

func snapMatchesTcpdump(t *testing.T, kind string) {
	v := newVeth(t)
	if _, err := exec.LookPath("tcpdump"); err != nil {
		testutil.SkipOrFail(t, "%s", "needs tcpdump (apt-get install tcpdump)")
	}
	var frames [][]byte
	tagged := 0
	for i, p := range randomPackets(400, 21) {
		p.vlans = [][]uint16{nil, nil, {42}, {5, 6}}[i%4]
		n := min([]int{60, 100, 104, 128, 600, 1514}[i%6]+4*len(p.vlans), 1514) // the veth's MTU
		if p.fragOff != 0 || len(p.frame(t)) > n {
			p.padTo = n
			frames = append(frames, p.frame(t))
		} else {
			frames = append(frames, fullFrame(t, p, n))
		}
		if len(p.vlans) > 0 {
			tagged++
		}
	}
	pcapPath := filepath.Join(t.TempDir(), "truth.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a hang guard, not a measurement
	defer cancel()
	td := exec.CommandContext(ctx, "ip", "netns", "exec", v.nsB, "tcpdump", "-i", v.ifB, "-s", "0", "-n", "-B", "16384",
		"--time-stamp-precision=nano", "-c", strconv.Itoa(len(frames)), "-w", pcapPath)
	stderr, err := td.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := td.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = td.Process.Kill(); _ = td.Wait() }()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "listening on") { // tcpdump's socket is bound and filtered
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }() // keep the pipe drained

	cfg := DefaultConfig()
	cfg.Identity.Seed = tseed
	cfg.Source.Kind, cfg.Source.Interface = kind, v.ifB
	cfg.Source.BlockSize, cfg.Source.NumBlocks = 1<<18, 8
	var readers []*Reader
	if err := inNetns(v.nsB, func() (err error) { readers, err = cfg.Open(nil); return err }); err != nil {
		t.Fatal(err)
	}
	defer CloseReaders(readers)
	if sl, ok := readers[0].Source().(Snaplener); !ok || sl.Snaplen() != cfg.Source.SnapLen(cfg.Identity) {
		t.Fatalf("the %s source does not keep the default snap length %d", kind, cfg.Source.SnapLen(cfg.Identity))
	}
	sendFrames(t, v.nsA, v.ifA, frames)

	tdErr := make(chan error, 1)
	go func() { tdErr <- td.Wait() }() // tcpdump exits after -c frames, its file flushed
	var got []Packet
	tdDone := false
	for len(got) < len(frames) {
		var p Packet
		err := readers[0].Next(&p)
		if errors.Is(err, ErrTimeout) {
			if tdDone {
				break // an idle poll after tcpdump had every frame: the ring is empty too
			}
			select {
			case err := <-tdErr:
				if err != nil {
					t.Fatalf("tcpdump: %v", err)
				}
				tdDone = true
			default:
			}
			if ctx.Err() != nil {
				t.Fatalf("no end after %d of %d frames", len(got), len(frames))
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	if !tdDone {
		if err := <-tdErr; err != nil {
			t.Fatalf("tcpdump: %v", err)
		}
	}
	var truth []Packet
	if err := EachPacket(pcapPath, testParser(t, nil), func(p *Packet) bool { truth = append(truth, *p); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(frames) || len(truth) != len(frames) {
		t.Fatalf("%d frames sent: %s read %d (counters %+v), tcpdump's file has %d", len(frames), kind, len(got), readers[0].Parser().Counters(), len(truth))
	}
	sameTS := 0
	for i, g := range got {
		w := truth[i]
		wantLen := w.WireLen
		if g.PktHash != w.PktHash || g.FlowHash != w.FlowHash || g.Key != w.Key || g.WireLen != wantLen || int(w.WireLen) != len(frames[i]) {
			t.Errorf("frame %d (%d bytes): %s %v %x/%x %d bytes, tcpdump %v %x/%x %d bytes", i, len(frames[i]),
				kind, g.Key, g.FlowHash, g.PktHash, g.WireLen, w.Key, w.FlowHash, w.PktHash, w.WireLen)
		}
		if g.TS == w.TS {
			sameTS++
		}
	}
	if sameTS != len(got) {
		t.Errorf("%d of %d packets have tcpdump's timestamp to the ns", sameTS, len(got))
	}
	c := readers[0].Parser().Counters()
	if c.ShortSnap != 0 || c.Truncated != 0 || c.Parsed != uint64(len(frames)) {
		t.Errorf("counters %+v: want all %d frames parsed, none short", c, len(frames))
	}
	t.Logf("%s at snap length %d: %d frames of 60-1514 bytes (%d tagged), identities, keys, wire lengths and timestamps equal to tcpdump -s 0's",
		kind, cfg.Source.SnapLen(cfg.Identity), len(got), tagged)
}
