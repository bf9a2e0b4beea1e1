//go:build linux

package capture

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/lds-net/lds/test/testutil"
)

// liveReader reads sources, each on its own goroutine, until stopped,
// keeping the packet hashes they parsed; any error but ErrTimeout fails
// the test.
type liveReader struct {
	mu     sync.Mutex
	hashes map[uint64]int
	big    atomic.Uint64 // frames longer than bigLen
	frames atomic.Uint64 // frames read
	bigLen int
	stop   chan struct{}
	wg     sync.WaitGroup
}

func startReader(t *testing.T, src Source, bigLen int) *liveReader {
	return startReaders(t, []Source{src}, bigLen)
}

func startReaders(t *testing.T, srcs []Source, bigLen int) *liveReader {
	t.Helper()
	lr := &liveReader{hashes: map[uint64]int{}, bigLen: bigLen, stop: make(chan struct{})}
	for _, src := range srcs {
		lr.wg.Add(1)
		go lr.read(t, src)
	}
	t.Cleanup(func() { lr.halt() })
	return lr
}

func (lr *liveReader) read(t *testing.T, src Source) {
	defer lr.wg.Done()
	cfg := DefaultConfig()
	cfg.Identity.Seed = tseed
	p, err := NewParser(cfg)
	if err != nil {
		t.Error(err)
		return
	}
	{
		var pkt Packet
		for {
			select {
			case <-lr.stop:
				return
			default:
			}
			data, ts, wl, err := src.ReadPacket(nil)
			if errors.Is(err, ErrTimeout) {
				continue
			}
			if err != nil {
				t.Errorf("ReadPacket: %v (the source must outlive the link's outages)", err)
				return
			}
			lr.frames.Add(1)
			if wl > lr.bigLen {
				lr.big.Add(1)
			}
			if p.Parse(data, wl, ts, src.LinkType(), &pkt) {
				lr.mu.Lock()
				lr.hashes[pkt.PktHash]++
				lr.mu.Unlock()
			}
		}
	}
}

func (lr *liveReader) halt() {
	select {
	case <-lr.stop:
	default:
		close(lr.stop)
	}
	lr.wg.Wait()
}

func (lr *liveReader) dups(hashes []uint64) int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	n := 0
	for _, h := range hashes {
		if lr.hashes[h] > 1 {
			n++
		}
	}
	return n
}

func (lr *liveReader) count(hashes []uint64) int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	n := 0
	for _, h := range hashes {
		if lr.hashes[h] > 0 {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// framesWithHashes builds n frames (seeded by seed) and their packet hashes.
func framesWithHashes(t *testing.T, n int, seed uint64) ([][]byte, []uint64) {
	spec := testParser(t, nil)
	var frames [][]byte
	var hs []uint64
	for _, b := range randomPackets(n, seed) {
		b.padTo = 60
		frames = append(frames, b.frame(t))
		id, r := spec.Identify(b.frame(t), 0, layers.LinkTypeEthernet)
		if r != ReasonOK {
			t.Fatal(r)
		}
		hs = append(hs, id.PktHash)
	}
	return frames, hs
}

// TestLiveLinkDownUp: an AF_PACKET source (one socket, and two in a
// fanout group) on an interface that is down at open, comes up, goes down
// and up again, loses its carrier, and is deleted and created again under
// the same name never fails; it counts each outage, reports the state,
// and captures every frame sent while the link is up, exactly once.
func TestLiveLinkDownUp(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) { liveLinkDownUp(t, workers) })
	}
}

func liveLinkDownUp(t *testing.T, workers int) {
	v := newVeth(t)
	run(t, "ip", "-n", v.nsB, "link", "set", v.ifB, "down")
	src := DefaultConfig().Source
	src.Kind, src.Interface, src.Workers = "afpacket", v.ifB, workers
	src.BlockSize, src.NumBlocks, src.PollTimeout = 1<<16, 8, 20*time.Millisecond
	var ss []Source
	if err := inNetns(v.nsB, func() (err error) { ss, err = OpenSources(src, nil); return err }); err != nil {
		t.Fatalf("open on a down interface: %v (want it to wait for the link)", err)
	}
	defer func() {
		for _, s := range ss {
			s.Close()
		}
	}()
	stats := func() DropStats {
		var d DropStats
		for _, s := range ss {
			w, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			d = d.Add(w)
		}
		return d
	}
	if d := stats(); d.Link != LinkDown || d.LinkDowns != 1 {
		t.Fatalf("down at open: %+v, want Link down and one outage", d)
	}
	lr := startReaders(t, ss, 1<<20)
	round := func(n int, seed uint64, wantDowns uint64) {
		t.Helper()
		waitFor(t, "the link up", func() bool { return stats().Link == LinkUp })
		frames, hs := framesWithHashes(t, n, seed)
		sendFrames(t, v.nsA, v.ifA, frames)
		waitFor(t, fmt.Sprintf("%d frames captured", n), func() bool { return lr.count(hs) == n })
		time.Sleep(50 * time.Millisecond) // catch duplicates, if any
		if k := lr.dups(hs); k != 0 {
			t.Errorf("%d frames captured more than once", k)
		}
		if d := stats(); d.LinkDowns != wantDowns {
			t.Errorf("outages %d, want %d", d.LinkDowns, wantDowns)
		}
	}
	run(t, "ip", "-n", v.nsB, "link", "set", v.ifB, "up")
	round(100, 11, 1)

	run(t, "ip", "-n", v.nsB, "link", "set", v.ifB, "down")
	waitFor(t, "the link seen down", func() bool { return stats().Link == LinkDown })
	run(t, "ip", "-n", v.nsB, "link", "set", v.ifB, "up")
	round(100, 12, 2)

	// The peer goes down: no carrier at B, an outage too.
	run(t, "ip", "-n", v.nsA, "link", "set", v.ifA, "down")
	waitFor(t, "no carrier seen", func() bool { return stats().Link == LinkDown })
	run(t, "ip", "-n", v.nsA, "link", "set", v.ifA, "up")
	round(100, 13, 3)

	// Deleted and created again under the same name (a new ifindex).
	run(t, "ip", "-n", v.nsB, "link", "del", v.ifB)
	waitFor(t, "the deleted link seen down", func() bool { return stats().Link == LinkDown })
	run(t, "ip", "-n", v.nsA, "link", "add", v.ifA, "type", "veth", "peer", "name", v.ifB, "netns", v.nsB)
	run(t, "ip", "-n", v.nsA, "link", "set", v.ifA, "up")
	run(t, "ip", "-n", v.nsB, "link", "set", v.ifB, "up")
	round(100, 14, 4)
	lr.halt()
	t.Logf("final stats %+v", stats())
}

var turnOff = regexp.MustCompile(`turn it off with: (ethtool -K \S+(?: \S+ off)+)`)

// TestLiveCoalescingRefused: GRO on at the capture interface is refused
// with the ethtool command that turns it off; running that command (as
// the message says) lets the source open; allow_coalescing opens it with
// GRO on, and the super-packets of a TCP bulk transfer are counted as
// oversize frames.
func TestLiveCoalescingRefused(t *testing.T) {
	v := newVeth(t)
	if _, err := exec.LookPath("ethtool"); err != nil {
		testutil.SkipOrFail(t, "%s", "needs ethtool")
	}
	run(t, "ip", "netns", "exec", v.nsB, "ethtool", "-K", v.ifB, "gro", "on")
	src := DefaultConfig().Source
	src.Kind, src.Interface = "afpacket", v.ifB
	src.BlockSize, src.NumBlocks, src.PollTimeout = 1<<20, 8, 20*time.Millisecond
	cfg := DefaultConfig()
	cfg.Identity.Seed = tseed
	cfg.Source = src
	var err error
	if e := inNetns(v.nsB, func() error { _, err = OpenSources(cfg.Source, nil); return nil }); e != nil {
		t.Fatal(e)
	}
	if !errors.Is(err, ErrCoalescing) {
		t.Fatalf("GRO on: %v, want a refusal", err)
	}
	m := turnOff.FindStringSubmatch(err.Error())
	if m == nil || !strings.Contains(err.Error(), v.ifB) || !strings.Contains(err.Error(), "capture.source.allow_coalescing: true") {
		t.Fatalf("refusal %q: want the interface, the ethtool command and the override key", err)
	}
	t.Logf("refused: %v", err)
	// Loopback's GRO flag is on, but loopback never coalesces: not refused.
	lo := src
	lo.Interface = "lo"
	var los Source
	if e := inNetns(v.nsB, func() error { los, err = OpenAFPacket(lo, 0, nil); return nil }); e != nil || err != nil {
		t.Fatalf("loopback refused: %v %v", e, err)
	}
	los.Close()
	// The advice, word for word.
	run(t, append([]string{"ip", "netns", "exec", v.nsB}, strings.Fields(m[1])...)...)
	var ss []Source
	if e := inNetns(v.nsB, func() error { ss, err = OpenSources(cfg.Source, nil); return nil }); e != nil {
		t.Fatal(e)
	}
	if err != nil {
		t.Fatalf("after %q: %v", m[1], err)
	}
	ss[0].Close()

	// GRO on again, allowed: super-packets are counted.
	run(t, "ip", "netns", "exec", v.nsB, "ethtool", "-K", v.ifB, "gro", "on")
	cfg.Source.AllowCoalescing = true
	if e := inNetns(v.nsB, func() error { ss, err = OpenSources(cfg.Source, nil); return nil }); e != nil {
		t.Fatal(e)
	}
	if err != nil {
		t.Fatalf("allow_coalescing: %v", err)
	}
	s := ss[0]
	defer s.Close()
	lr := startReader(t, s, 1500+14)
	tcpBulk(t, v, 8<<20)
	waitFor(t, "oversize frames", func() bool { d, _ := s.Stats(); return d.Oversize > 0 })
	lr.halt()
	d, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if d.Oversize != lr.big.Load() {
		t.Errorf("oversize counter %d, frames longer than 1514 bytes read %d", d.Oversize, lr.big.Load())
	}
	t.Logf("TCP bulk of 8 MiB with GRO on: %d oversize frames", d.Oversize)
}

// tcpBulk gives A and B addresses and sends n bytes over one kernel TCP
// connection from A to B.
func tcpBulk(t *testing.T, v *vethPair, n int) {
	t.Helper()
	run(t, "ip", "-n", v.nsA, "addr", "add", "10.213.0.1/24", "dev", v.ifA)
	run(t, "ip", "-n", v.nsB, "addr", "add", "10.213.0.2/24", "dev", v.ifB)
	var ln net.Listener
	if err := inNetns(v.nsB, func() (err error) { ln, err = net.Listen("tcp4", "10.213.0.2:0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<16)
		total := 0
		for {
			k, err := c.Read(buf)
			total += k
			if err != nil {
				got <- total
				return
			}
		}
	}()
	var c net.Conn
	if err := inNetns(v.nsA, func() (err error) { c, err = net.DialTimeout("tcp4", ln.Addr().String(), 10*time.Second); return err }); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	for sent := 0; sent < n; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if k := <-got; k < n {
		t.Fatalf("received %d of %d bytes", k, n)
	}
}

// TestLiveOversizeFromSegmentation: with GRO off at the tap, a veth still
// hands it its peer's TSO/GSO super-packets, which the oversize counter
// counts; with the peer's segmentation offload off, no frame is oversize.
func TestLiveOversizeFromSegmentation(t *testing.T) {
	if _, err := exec.LookPath("ethtool"); err != nil {
		testutil.SkipOrFail(t, "%s", "needs ethtool")
	}
	for _, peerOff := range []bool{false, true} {
		v := newVeth(t)
		if peerOff {
			run(t, "ip", "netns", "exec", v.nsA, "ethtool", "-K", v.ifA, "tso", "off", "gso", "off")
		}
		src := DefaultConfig().Source
		src.Kind, src.Interface = "afpacket", v.ifB
		src.BlockSize, src.NumBlocks, src.PollTimeout = 1<<20, 8, 20*time.Millisecond
		var s Source
		if err := inNetns(v.nsB, func() (err error) { s, err = OpenAFPacket(src, 0, nil); return err }); err != nil {
			t.Fatal(err)
		}
		lr := startReader(t, s, 1500+14)
		tcpBulk(t, v, 8<<20)
		waitFor(t, "every frame of the transfer read", func() bool {
			d, _ := s.Stats()
			return d.Received > 0 && lr.frames.Load() >= d.Received-d.Kernel
		})
		lr.halt()
		d, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		t.Logf("peer tso/gso off %v: %d oversize of %d frames", peerOff, d.Oversize, d.Received)
		if d.Oversize != lr.big.Load() {
			t.Errorf("oversize counter %d, frames longer than 1514 bytes read %d", d.Oversize, lr.big.Load())
		}
		if peerOff != (d.Oversize == 0) {
			t.Errorf("peer tso/gso off %v: %d oversize frames", peerOff, d.Oversize)
		}
	}
}
