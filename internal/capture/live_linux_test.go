//go:build linux

package capture

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/test/testutil"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"
)

type vethPair struct{ nsA, nsB, ifA, ifB string }

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newVeth makes two namespaces joined by a veth, IPv6 off (no ND/MLD
// chatter) and no addresses: the only frames are the test's.
func newVeth(t *testing.T) *vethPair {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.SkipOrFail(t, "%s", "needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testutil.SkipOrFail(t, "%s", "needs iproute2 (ip)")
	}
	tag := fmt.Sprintf("%d-%d", os.Getpid(), rand.IntN(1000))
	v := &vethPair{nsA: "ldscap-" + tag + "-a", nsB: "ldscap-" + tag + "-b",
		ifA: fmt.Sprintf("lc%d%da", os.Getpid()%100000, rand.IntN(1000)), ifB: ""}
	v.ifB = v.ifA[:len(v.ifA)-1] + "b"
	for _, ns := range []string{v.nsA, v.nsB} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		for _, k := range []string{"all", "default"} {
			run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf."+k+".disable_ipv6=1")
		}
	}
	run(t, "ip", "link", "add", v.ifA, "type", "veth", "peer", "name", v.ifB)
	t.Cleanup(func() { exec.Command("ip", "link", "del", v.ifA).Run() }) // if still in the root namespace
	run(t, "ip", "link", "set", v.ifA, "netns", v.nsA)
	run(t, "ip", "link", "set", v.ifB, "netns", v.nsB)
	run(t, "ip", "-n", v.nsA, "link", "set", v.ifA, "up")
	run(t, "ip", "-n", v.nsB, "link", "set", v.ifB, "up")
	// The kernel reports the carrier (IFF_RUNNING) a little after the
	// link is set up; a source opened before would count an outage.
	for _, e := range [][2]string{{v.nsA, v.ifA}, {v.nsB, v.ifB}} {
		waitFor(t, e[1]+" running", func() bool {
			out, _ := exec.Command("ip", "-n", e[0], "-o", "link", "show", "dev", e[1]).Output()
			return strings.Contains(string(out), "LOWER_UP") && strings.Contains(string(out), "state UP")
		})
	}
	return v
}

// inNetns runs fn on a thread moved into namespace ns.
func inNetns(ns string, fn func() error) error { return testutil.InNetns(ns, fn) }

// sendFrames writes raw frames on ifname inside ns.
func sendFrames(t *testing.T, ns, ifname string, frames [][]byte) {
	t.Helper()
	err := inNetns(ns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
		for i, f := range frames {
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				return fmt.Errorf("frame %d: %w", i, err)
			}
			if i%50 == 49 {
				time.Sleep(time.Millisecond) // stay well inside the ring
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type captured struct {
	pkt    Packet
	worker int
}

// liveRoundTrip sends a known set of frames from A and captures them at B
// through cfg's sources; it checks identity, timestamps and drops.
func liveRoundTrip(t *testing.T, v *vethPair, src SourceConfig) {
	cfg := DefaultConfig()
	cfg.Identity.Seed = tseed
	cfg.Source = src
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var readers []*Reader
	err := inNetns(v.nsB, func() error {
		var err error
		readers, err = cfg.Open(nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pkts := randomPackets(300, 5)
	spec := testParser(t, nil)
	want := map[uint64]FlowKey{}
	var frames [][]byte
	for i, b := range pkts {
		b.vlans = [][]uint16{nil, {42}, {5, 6}}[i%3]
		b.padTo = 60
		frames = append(frames, b.frame(t))
		id, r := spec.Identify(b.ipPacket(t), 0, layers.LinkTypeRaw)
		if r != ReasonOK {
			t.Fatal(r)
		}
		want[id.PktHash] = id.Key
	}
	start := time.Now().UnixNano()
	var mu sync.Mutex
	var got []captured
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var p Packet
				err := r.Next(&p)
				if errors.Is(err, ErrTimeout) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, captured{p, w})
				mu.Unlock()
			}
		}()
	}
	sendFrames(t, v.nsA, v.ifA, frames)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(frames) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // catch duplicates, if any
	close(stop)
	wg.Wait()
	end := time.Now().UnixNano()
	var drops DropStats
	var counters ParseCounters
	for _, r := range readers {
		d, err := r.Source().Stats()
		if err != nil {
			t.Error(err)
		}
		drops = drops.Add(d)
		counters = counters.Add(r.Parser().Counters())
	}
	if err := CloseReaders(readers); err != nil {
		t.Error(err)
	}

	seen := map[uint64]int{}
	subNs := 0
	flowWorker := map[FlowKey]int{}
	for _, c := range got {
		k, ok := want[c.pkt.PktHash]
		if !ok {
			t.Errorf("captured a packet that was not sent: %v %x", c.pkt.Key, c.pkt.PktHash)
			continue
		}
		if k != c.pkt.Key {
			t.Errorf("packet %x: key %v, want %v", c.pkt.PktHash, c.pkt.Key, k)
		}
		seen[c.pkt.PktHash]++
		if c.pkt.TS < start || c.pkt.TS > end {
			t.Errorf("timestamp %d outside the test's window [%d, %d]", c.pkt.TS, start, end)
		}
		if c.pkt.TS%1000 != 0 {
			subNs++
		}
		if c.pkt.Key.SPort != 0 { // fragments may be spread differently by the kernel's hash
			if w, ok := flowWorker[c.pkt.Key]; ok && w != c.worker {
				t.Errorf("flow %v on workers %d and %d; fanout should keep a flow on one", c.pkt.Key, w, c.worker)
			}
			flowWorker[c.pkt.Key] = c.worker
		}
	}
	for h := range want {
		if seen[h] != 1 {
			t.Errorf("packet %x (%v) captured %d times, want once", h, want[h], seen[h])
		}
	}
	perWorker := make([]int, len(readers))
	for _, c := range got {
		perWorker[c.worker]++
	}
	for w, n := range perWorker {
		if len(readers) > 1 && n == 0 {
			t.Errorf("worker %d of %d got no packet: fanout did not spread the flows (%v)", w, len(readers), perWorker)
		}
	}
	if subNs == 0 {
		t.Error("no timestamp has a sub-microsecond part: not nanosecond timestamps")
	}
	if drops.Kernel != 0 || drops.Interface != 0 {
		t.Errorf("drops %+v, want none", drops)
	}
	t.Logf("captured %d packets on %d workers, %d with sub-µs timestamps, drops %+v, counters %+v",
		len(got), len(readers), subNs, drops, counters)
}

func TestLiveAFPacket(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface, src.Promiscuous = "afpacket", v.ifB, true
	src.BlockSize, src.NumBlocks = 1<<18, 8
	liveRoundTrip(t, v, src)
}

// TestLiveAFPacketSmallRing: tcpdump -B 1024's geometry, which
// OpenAFPacket splits into 32 × 32 KiB blocks; every frame still arrives
// once and whole.
func TestLiveAFPacketSmallRing(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface = "afpacket", v.ifB
	src.BlockSize, src.NumBlocks = 1<<18, 4
	liveRoundTrip(t, v, src)
}

func TestLiveAFPacketFanout(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface, src.Workers = "afpacket", v.ifB, 2
	src.BlockSize, src.NumBlocks = 1<<18, 8
	liveRoundTrip(t, v, src)
}

// TestLiveAFPacketKernelDrops overflows a one-block ring nobody reads and
// checks the counters against the frames sent: every frame is either read
// back or counted as a kernel drop, once, across several Stats reads (the
// kernel resets its counters on each). Reading allocates nothing.
func TestLiveAFPacketKernelDrops(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface = "afpacket", v.ifB
	src.BlockSize, src.NumBlocks = 4096, 1 // RingGeometry leaves it: ~20 frames
	src.PollTimeout = 20 * time.Millisecond
	var s Source
	err := inNetns(v.nsB, func() error {
		var err error
		s, err = OpenAFPacket(src, 0, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pkts := randomPackets(400, 7)
	var frames [][]byte
	for _, b := range pkts {
		b.padTo = 60
		frames = append(frames, b.frame(t))
	}
	half := len(frames) / 2
	sendFrames(t, v.nsA, v.ifA, frames[:half])
	mid, err := s.Stats() // a read in between: the kernel resets its counters here
	if err != nil {
		t.Fatal(err)
	}
	sendFrames(t, v.nsA, v.ifA, frames[half:])
	read := 0
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for {
		_, _, _, err := s.ReadPacket(nil)
		if errors.Is(err, ErrTimeout) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		read++
	}
	runtime.ReadMemStats(&m1)
	allocs := m1.Mallocs - m0.Mallocs
	d, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if d.Received != uint64(len(frames)) {
		t.Errorf("Received %d, want the %d frames sent (dropped ones included); mid-run read %+v", d.Received, len(frames), mid)
	}
	if d.Kernel == 0 || uint64(read)+d.Kernel != uint64(len(frames)) {
		t.Errorf("read %d + kernel drops %d, want %d frames sent with some dropped (a 4 KiB ring)", read, d.Kernel, len(frames))
	}
	if mid.Kernel == 0 || mid.Kernel > d.Kernel {
		t.Errorf("kernel drops %d after half the frames, %d at the end: want > 0 and not decreasing", mid.Kernel, d.Kernel)
	}
	if allocs != 0 {
		t.Errorf("reading %d packets and a timeout: %d allocations, want 0", read, allocs)
	}
	t.Logf("%d frames: read %d, kernel drops %d (after half: %+v)", len(frames), read, d.Kernel, mid)
}
