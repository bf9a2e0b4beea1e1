package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lds-net/lds/tools/linkem"
)

// BlastConfig shapes the packet blaster of the live performance runs:
// minimal UDP/IPv4 frames from SrcAddr to DstAddr over Flows source ports,
// pre-built, sent in batches of Batch with sendmmsg(2) on an AF_PACKET
// socket that bypasses the qdisc, so that one core pushes as many frames
// into the veth as the kernel lets it.
type BlastConfig struct {
	Flows    int           // distinct 5-tuples (source ports), visited in a fixed shuffled order
	Payload  int           // UDP payload bytes; the first 8 carry a per-frame counter (unique identities)
	PPS      int           // offered rate; 0 = as fast as possible
	Duration time.Duration // how long to send
	Batch    int           // frames per sendmmsg
	Threads  int           // sending threads (one socket each); 1 leaves the other cores to the captures
	DstMAC   string        // a MAC no interface owns: the sink's kernel drops the frames right after the taps
	// CPUs pins sending thread i to CPUs[i % len(CPUs)] (nil: the
	// scheduler places them). The veth delivers each frame to the taps
	// on the sending thread's CPU, so pinning the threads and the
	// captures apart makes every capture read its ring across cores,
	// run after run (PerfOptions.ToolCPUs).
	CPUs []int
}

// DefaultBlast returns 1024 flows of 74-byte frames, as fast as possible, 5 s.
func DefaultBlast() BlastConfig {
	return BlastConfig{Flows: 1024, Payload: 32, Duration: 5 * time.Second, Batch: 64, Threads: 1, DstMAC: "02:00:00:00:00:02"}
}

// Validate checks the keys.
func (c BlastConfig) Validate() error {
	var errs []error
	if c.Flows < 1 || c.Flows > 65535 {
		errs = append(errs, fmt.Errorf("blast.flows: %d outside 1..65535 (one source port per flow)", c.Flows))
	}
	if c.Payload < 8 || c.Payload > 1400 {
		errs = append(errs, fmt.Errorf("blast.payload: %d outside 8..1400 (8 bytes of counter; below the MTU)", c.Payload))
	}
	if c.PPS < 0 {
		errs = append(errs, fmt.Errorf("blast.pps: %d is negative (0 = as fast as possible)", c.PPS))
	}
	if c.Duration <= 0 {
		errs = append(errs, errors.New("blast.duration: must be > 0"))
	}
	if c.Batch < 1 || c.Batch > 1024 {
		errs = append(errs, fmt.Errorf("blast.batch: %d outside 1..1024", c.Batch))
	}
	if c.Threads < 1 || c.Threads > 64 {
		errs = append(errs, fmt.Errorf("blast.threads: %d outside 1..64", c.Threads))
	}
	if _, err := net.ParseMAC(c.DstMAC); err != nil {
		errs = append(errs, fmt.Errorf("blast.dst_mac: %w", err))
	}
	return errors.Join(errs...)
}

// BlastStats is what the blaster did.
type BlastStats struct {
	Sent    uint64        // frames the kernel accepted
	Retries uint64        // sendmmsg calls refused with ENOBUFS/EAGAIN (retried)
	Elapsed time.Duration // first send to last
}

// PPS is the achieved send rate.
func (s BlastStats) PPS() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Sent) / s.Elapsed.Seconds()
}

// mmsghdr is struct mmsghdr of sendmmsg(2) (not wrapped by x/sys/unix).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// Blaster sends the pre-built frames from Threads sockets; one per veth,
// reused across runs.
type Blaster struct {
	c     BlastConfig
	socks []*blastSock
}

// blastSock is one sending thread's socket and frames.
type blastSock struct {
	c      BlastConfig
	fd     int
	tmpl   []byte // Flows templates of frameLen bytes, back to back
	order  []uint16
	frames []byte // Batch send slots of frameLen bytes
	iov    []unix.Iovec
	msgs   []mmsghdr
	flen   int
	next   uint64 // counter of the next frame
}

// NewBlaster opens the blaster's sockets on ifname in the network
// namespace netns (a path; "" = here) and builds the frames.
func NewBlaster(netns, ifname string, c BlastConfig) (*Blaster, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	bl := &Blaster{c: c}
	for i := range c.Threads {
		s, err := newBlastSock(netns, ifname, c)
		if err != nil {
			bl.Close()
			return nil, err
		}
		s.next = uint64(i) << 48 // disjoint counters: identities stay unique
		bl.socks = append(bl.socks, s)
	}
	return bl, nil
}

// Close releases the sockets.
func (bl *Blaster) Close() error {
	var errs []error
	for _, s := range bl.socks {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// Run sends from every thread for the configured duration (or until ctx
// ends), each paced to PPS/Threads if PPS is set, and sums their counts.
func (bl *Blaster) Run(ctx context.Context) (BlastStats, error) {
	type out struct {
		st  BlastStats
		err error
	}
	ch := make(chan out, len(bl.socks))
	for i, s := range bl.socks {
		cpu := -1
		if len(bl.c.CPUs) > 0 {
			cpu = bl.c.CPUs[i%len(bl.c.CPUs)]
		}
		go func() {
			st, err := s.Run(ctx, bl.c.PPS/len(bl.socks), cpu)
			ch <- out{st, err}
		}()
	}
	var tot BlastStats
	var errs []error
	for range bl.socks {
		o := <-ch
		tot.Sent += o.st.Sent
		tot.Retries += o.st.Retries
		tot.Elapsed = max(tot.Elapsed, o.st.Elapsed)
		errs = append(errs, o.err)
	}
	return tot, errors.Join(errs...)
}

func newBlastSock(netns, ifname string, c BlastConfig) (*blastSock, error) {
	dmac, _ := net.ParseMAC(c.DstMAC)
	b := &blastSock{c: c, fd: -1, flen: 14 + 20 + 8 + c.Payload}
	var smac net.HardwareAddr
	err := linkem.InNetns(netns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("testbed: blaster interface %q: %w", ifname, err)
		}
		smac = ifc.HardwareAddr
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("testbed: blaster AF_PACKET socket (needs CAP_NET_RAW): %w", err)
		}
		b.fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 16<<20)
		// The veth has no queue to keep; skipping the qdisc layer is
		// what a traffic generator does to reach the highest rate.
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifc.Index}); err != nil {
			return fmt.Errorf("testbed: bind blaster socket to %q: %w", ifname, err)
		}
		return nil
	})
	if err != nil {
		b.Close()
		return nil, err
	}
	b.tmpl = make([]byte, c.Flows*b.flen)
	for f := range c.Flows {
		buildBlastFrame(b.tmpl[f*b.flen:(f+1)*b.flen], dmac, smac, uint16(10000+f), c.Payload)
	}
	// A fixed shuffle (multiplicative stride) spreads consecutive frames
	// over flows, so a fanout group sees all its sockets busy at once.
	b.order = make([]uint16, c.Flows)
	stride := 1
	for _, p := range []int{7919, 7907, 7901, 4099, 1021, 509, 251, 127, 61, 31, 13, 7, 3} {
		if c.Flows%p != 0 && p < c.Flows {
			stride = p
			break
		}
	}
	for i := range b.order {
		b.order[i] = uint16((i * stride) % c.Flows)
	}
	b.frames = make([]byte, c.Batch*b.flen)
	b.iov = make([]unix.Iovec, c.Batch)
	b.msgs = make([]mmsghdr, c.Batch)
	for i := range b.msgs {
		b.iov[i].Base = &b.frames[i*b.flen]
		b.iov[i].SetLen(b.flen)
		b.msgs[i].hdr.Iov = &b.iov[i]
		b.msgs[i].hdr.SetIovlen(1)
	}
	return b, nil
}

// Close releases the socket.
func (b *blastSock) Close() error {
	if b.fd >= 0 {
		err := unix.Close(b.fd)
		b.fd = -1
		return err
	}
	return nil
}

// buildBlastFrame writes an Ethernet + IPv4 + UDP frame SrcAddr:sport →
// DstAddr:9 with a zero payload into f (len = 42 + payload).
func buildBlastFrame(f []byte, dmac, smac net.HardwareAddr, sport uint16, payload int) {
	copy(f[0:6], dmac)
	copy(f[6:12], smac)
	f[12], f[13] = 0x08, 0x00
	ip := f[14:34]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
	binary.BigEndian.PutUint16(ip[4:], sport) // IP id: any value
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8], ip[9] = 64, 17
	s, d := SrcAddr.As4(), DstAddr.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	u := f[34:42]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], 9) // discard
	binary.BigEndian.PutUint16(u[4:], uint16(8+payload))
	u[6], u[7] = 0, 0 // no checksum: legal for UDP over IPv4
	clear(f[42:])
}

// fill stamps the next batch into the send slots: flow template, then the
// frame's counter in the first payload bytes. No allocation.
func (b *blastSock) fill() {
	n := uint64(len(b.order))
	for i := range b.c.Batch {
		k := b.next
		b.next++
		f := int(b.order[k%n])
		dst := b.frames[i*b.flen : (i+1)*b.flen]
		copy(dst, b.tmpl[f*b.flen:(f+1)*b.flen])
		binary.BigEndian.PutUint64(dst[42:], k)
	}
}

// send hands frames [from, Batch) to the kernel; it returns how many it took.
func (b *blastSock) send(from int) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(b.fd), uintptr(unsafe.Pointer(&b.msgs[from])), uintptr(b.c.Batch-from), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// Run sends for the configured duration (or until ctx ends), paced to pps
// if > 0. It runs on one locked OS thread: the veth delivers each frame to
// the taps in this thread's softirq context, so one thread and the
// kernel's receive path share one core and the captures get the rest.
func (b *blastSock) Run(ctx context.Context, pps, cpu int) (BlastStats, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var st BlastStats
	if cpu >= 0 {
		restore, err := pinThread(cpu)
		if err != nil {
			return st, err
		}
		defer restore()
	}
	start := time.Now()
	stop := start.Add(b.c.Duration)
	var gap time.Duration
	if pps > 0 {
		gap = time.Second / time.Duration(pps)
	}
	for it := 0; ; it++ {
		if it&15 == 0 {
			now := time.Now()
			if !now.Before(stop) || ctx.Err() != nil {
				break
			}
		}
		if gap > 0 {
			due := start.Add(time.Duration(st.Sent) * gap)
			if d := time.Until(due); d > 200*time.Microsecond {
				time.Sleep(d)
			}
			if !time.Now().Before(stop) {
				break
			}
		}
		b.fill()
		for from := 0; from < b.c.Batch; {
			n, err := b.send(from)
			if err != nil {
				if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					st.Retries++
					runtime.Gosched()
					continue
				}
				st.Elapsed = time.Since(start)
				return st, fmt.Errorf("testbed: blaster sendmmsg: %w", err)
			}
			from += n
			st.Sent += uint64(n)
		}
	}
	st.Elapsed = time.Since(start)
	return st, ctx.Err()
}

// pinThread pins the calling (locked) OS thread to cpu and returns what
// puts its former CPU set back.
func pinThread(cpu int) (func(), error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("testbed: blaster CPU set: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("testbed: pin the blaster to CPU %d: %w", cpu, err)
	}
	return func() { _ = unix.SchedSetaffinity(0, &old) }, nil
}
