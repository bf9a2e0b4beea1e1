package linkem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lds-net/lds/internal/heapq"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/lds-net/lds/internal/match"
)

// LateBuckets are the upper bounds (ns) of the lateness histogram: how
// long after its due time the scheduler wrote a frame. The last bucket
// counts everything above the last bound.
var LateBuckets = [...]int64{5e3, 10e3, 25e3, 50e3, 100e3, 250e3, 500e3, 1e6}

// DirStats counts what one direction did.
type DirStats struct {
	Received   uint64 // frames read (not our own writes)
	Forwarded  uint64 // frames written out, delayed or immediate
	Immediate  uint64 // of Forwarded: matched no class, or a zero-delay lossless one
	Lost       uint64 // dropped by the loss model
	Overflow   uint64 // dropped: queue_frames frames already held
	Truncated  uint64 // dropped: longer than frame_bytes
	SendErrors uint64 // write failed (frame dropped)
	// Lateness of delayed frames: write time minus due time.
	LateSumNS int64
	LateMaxNS int64
	Late      [len(LateBuckets) + 1]uint64
}

// Stats of both directions.
type Stats struct {
	Forward, Reverse DirStats
}

type dirCounters struct {
	received, forwarded, immediate, lost, overflow, truncated, sendErrors atomic.Uint64
	lateSum, lateMax                                                      atomic.Int64
	late                                                                  [len(LateBuckets) + 1]atomic.Uint64
}

func (c *dirCounters) snapshot() DirStats {
	s := DirStats{
		Received: c.received.Load(), Forwarded: c.forwarded.Load(), Immediate: c.immediate.Load(),
		Lost: c.lost.Load(), Overflow: c.overflow.Load(), Truncated: c.truncated.Load(),
		SendErrors: c.sendErrors.Load(), LateSumNS: c.lateSum.Load(), LateMaxNS: c.lateMax.Load(),
	}
	for i := range c.late {
		s.Late[i] = c.late[i].Load()
	}
	return s
}

func (c *dirCounters) observeLate(ns int64) {
	if ns < 0 {
		ns = 0
	}
	c.lateSum.Add(ns)
	if ns > c.lateMax.Load() {
		c.lateMax.Store(ns) // only the scheduler writes: no lost update
	}
	i := 0
	for i < len(LateBuckets) && ns > LateBuckets[i] {
		i++
	}
	c.late[i].Add(1)
}

// frame is one held frame.
type frame struct {
	buf []byte
	n   int
	due int64  // release time, monotonic ns since Emulator.t0
	seq uint64 // arrival order: ties release in arrival order
	dir int
}

type class struct {
	rule      match.Compiled
	s         sampler
	loss      lossState
	fifo      bool
	lastDue   int64
	immediate bool
}

type direction struct {
	name    string
	in, out *rawSock
	classes []class
	rng     *rand.Rand
	ctr     dirCounters
}

// Emulator relays frames between two interfaces with emulated delay and loss.
type Emulator struct {
	cfg        Config
	log        *slog.Logger
	dirs       [2]*direction
	frameBytes int
	napMax     int64
	// Release times are kept on the monotonic clock (ns since t0), so a
	// step of the wall clock (NTP, a PTP slave on this host) cannot hold
	// frames back; mono0 is CLOCK_MONOTONIC at t0, for clock_nanosleep.
	t0    time.Time
	mono0 int64

	mu        sync.Mutex
	heap      []*frame
	free      []*frame
	allocated int
	seq       uint64
	wake      chan struct{}
}

// New validates cfg and opens the raw sockets (in cfg.Netns if set).
// Close releases them if Run is never called.
func New(cfg Config, log *slog.Logger) (*Emulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Emulator{cfg: cfg, log: log, wake: make(chan struct{}, 1)}
	var mono unix.Timespec
	e.t0 = time.Now()
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return nil, fmt.Errorf("linkem: CLOCK_MONOTONIC: %w", err)
	}
	e.mono0 = mono.Nano()
	var a, b *rawSock
	err := InNetns(cfg.Netns, func() error {
		var err error
		if a, err = openRaw(cfg.A, cfg.SocketBuffer, 100*time.Millisecond); err != nil {
			return err
		}
		if b, err = openRaw(cfg.B, cfg.SocketBuffer, 100*time.Millisecond); err != nil {
			_ = a.close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e.frameBytes = cfg.FrameBytes
	if e.frameBytes == 0 {
		e.frameBytes = max(a.mtu, b.mtu) + 18
	}
	minDelay := int64(time.Millisecond)
	for i, p := range []*Profile{&cfg.Forward, &cfg.Reverse} {
		d := &direction{name: [2]string{"forward", "reverse"}[i], in: a, out: b,
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+0x9e3779b97f4a7c15))}
		if i == 1 {
			d.in, d.out = b, a
		}
		for j := range p.Classes {
			pc := &p.Classes[j]
			r, _ := pc.Match.Compile("") // validated above
			c := class{rule: r, s: sampler{pc.Delay}, loss: lossState{l: pc.Loss}, fifo: pc.FIFO, immediate: pc.immediate()}
			if !c.immediate {
				minDelay = min(minDelay, int64(pc.Delay.minimum()))
			}
			d.classes = append(d.classes, c)
		}
		e.dirs[i] = d
	}
	// While napping, the scheduler cannot see a frame that arrives with an
	// earlier due time than the current head; such a frame is due no
	// sooner than minDelay after its arrival, so naps shorter than that
	// (less the spin window) never make it late.
	e.napMax = min(max(minDelay-int64(cfg.Spin)-20e3, 20e3), 1e6)
	return e, nil
}

// Stats returns the counters so far (safe while Run runs).
func (e *Emulator) Stats() Stats {
	return Stats{Forward: e.dirs[0].ctr.snapshot(), Reverse: e.dirs[1].ctr.snapshot()}
}

// Close releases the sockets. Run closes them itself when it returns.
func (e *Emulator) Close() error {
	return errors.Join(e.dirs[0].in.close(), e.dirs[0].out.close())
}

// Run relays until ctx is done; frames still held then are dropped.
func (e *Emulator) Run(ctx context.Context) error {
	defer func() { _ = e.Close() }()
	g, ctx := errgroup.WithContext(ctx)
	for _, d := range e.dirs {
		g.Go(func() error { return e.read(ctx, d) })
	}
	g.Go(func() error { return e.schedule(ctx) })
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func (e *Emulator) getFrame() *frame {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.getFrameLocked()
}

func (e *Emulator) getFrameLocked() *frame {
	if n := len(e.free); n > 0 {
		f := e.free[n-1]
		e.free = e.free[:n-1]
		return f
	}
	if e.allocated >= e.cfg.QueueFrames+4 { // +4: the readers' spares
		return nil
	}
	e.allocated++
	return &frame{buf: make([]byte, e.frameBytes)}
}

// read is one direction's reader: classify, draw, write at once or hold.
func (e *Emulator) read(ctx context.Context, d *direction) error {
	var st recvState
	f := e.getFrame()
	if f == nil {
		return errors.New("linkem: queue_frames too small for the readers' buffers")
	}
	for ctx.Err() == nil {
		n, ts, out, err := d.in.recv(&st, f.buf)
		if errors.Is(err, errTimeout) {
			continue
		}
		if err != nil {
			return err
		}
		if out {
			continue // our own write on this interface (if the kernel still hands it over)
		}
		d.ctr.received.Add(1)
		if n > len(f.buf) {
			d.ctr.truncated.Add(1)
			continue
		}
		ci := classify(d.classes, f.buf[:n])
		if ci < 0 || d.classes[ci].immediate {
			if err := d.out.write(f.buf[:n]); err != nil {
				d.ctr.sendErrors.Add(1)
				continue
			}
			d.ctr.forwarded.Add(1)
			d.ctr.immediate.Add(1)
			continue
		}
		c := &d.classes[ci]
		if c.loss.lost(d.rng) {
			d.ctr.lost.Add(1)
			continue
		}
		// The kernel stamped the frame on the wall clock; carry its age
		// over to the monotonic clock (bounded: a wall-clock step between
		// the stamp and now must not hold or rush the frame).
		now := time.Now()
		age := min(max(now.UnixNano()-ts, 0), int64(time.Second))
		due := int64(now.Sub(e.t0)) - age + c.s.draw(d.rng)
		if c.fifo {
			due = max(due, c.lastDue)
			c.lastDue = due
		}
		f.n, f.due, f.dir = n, due, dirIndex(e, d)
		e.mu.Lock()
		next := e.getFrameLocked()
		if next == nil {
			e.mu.Unlock()
			d.ctr.overflow.Add(1)
			continue // keep f as the spare
		}
		e.seq++
		f.seq = e.seq
		e.push(f)
		e.mu.Unlock()
		f = next
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	return ctx.Err()
}

// now is the monotonic time in ns since t0 (vDSO, no syscall).
func (e *Emulator) now() int64 { return int64(time.Since(e.t0)) }

func dirIndex(e *Emulator, d *direction) int {
	if e.dirs[0] == d {
		return 0
	}
	return 1
}

// schedule releases held frames at their due time on a precise thread.
func (e *Emulator) schedule(ctx context.Context) error {
	if err := preciseThread(); err != nil {
		e.log.Warn("linkem: timer slack not lowered; release times will be later by up to 50µs", "err", err)
	}
	spin := int64(e.cfg.Spin)
	ready := make([]*frame, 0, 256)
	for {
		e.mu.Lock()
		if len(e.heap) == 0 {
			e.mu.Unlock()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-e.wake:
			}
			continue
		}
		due := e.heap[0].due
		e.mu.Unlock()
		now := e.now()
		if due-now > spin {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			sleepUntil(e.mono0 + min(due-spin, now+e.napMax))
			continue
		}
		for now < due {
			now = e.now()
		}
		e.mu.Lock()
		for len(e.heap) > 0 && e.heap[0].due <= now {
			ready = append(ready, e.pop())
		}
		e.mu.Unlock()
		for _, f := range ready {
			d := e.dirs[f.dir]
			if err := d.out.write(f.buf[:f.n]); err != nil {
				d.ctr.sendErrors.Add(1)
			} else {
				d.ctr.forwarded.Add(1)
				d.ctr.observeLate(e.now() - f.due)
			}
		}
		e.mu.Lock()
		e.free = append(e.free, ready...)
		e.mu.Unlock()
		clear(ready)
		ready = ready[:0]
	}
}

// classify returns the index of the first class matching the frame's IP
// packet, or -1 (not IP, or no class matches).
func classify(cs []class, b []byte) int {
	if len(cs) == 0 {
		return -1
	}
	src, dst, proto, sport, dport, ok := parseFrame(b)
	if !ok {
		return -1
	}
	for i := range cs {
		if cs[i].rule.Match(src, dst, proto, sport, dport) {
			return i
		}
	}
	return -1
}

// parseFrame extracts the invariant fields the class rules use from an
// Ethernet frame (up to two VLAN tags; IPv4, or IPv6 without extension
// headers). ICMP carries type<<8|code and the identifier as ports, as in
// the rest of lds.
func parseFrame(b []byte) (src, dst netip.Addr, proto uint8, sport, dport uint16, ok bool) {
	if len(b) < 14 {
		return
	}
	et := uint16(b[12])<<8 | uint16(b[13])
	off := 14
	for i := 0; i < 2 && (et == 0x8100 || et == 0x88a8); i++ {
		if len(b) < off+4 {
			return
		}
		et = uint16(b[off+2])<<8 | uint16(b[off+3])
		off += 4
	}
	var l4 int
	var frag bool
	switch et {
	case 0x0800:
		if len(b) < off+20 {
			return
		}
		ihl := int(b[off]&0x0f) * 4
		if ihl < 20 || len(b) < off+ihl {
			return
		}
		proto = b[off+9]
		src = netip.AddrFrom4([4]byte(b[off+12 : off+16]))
		dst = netip.AddrFrom4([4]byte(b[off+16 : off+20]))
		frag = (uint16(b[off+6])<<8|uint16(b[off+7]))&0x1fff != 0
		l4 = off + ihl
	case 0x86dd:
		if len(b) < off+40 {
			return
		}
		proto = b[off+6]
		src = netip.AddrFrom16([16]byte(b[off+8 : off+24])).Unmap()
		dst = netip.AddrFrom16([16]byte(b[off+24 : off+40])).Unmap()
		l4 = off + 40
	default:
		return
	}
	ok = true
	if frag {
		return // later fragments carry no ports
	}
	switch proto {
	case 6, 17, 132:
		if len(b) >= l4+4 {
			sport = uint16(b[l4])<<8 | uint16(b[l4+1])
			dport = uint16(b[l4+2])<<8 | uint16(b[l4+3])
		}
	case 1, 58:
		if len(b) >= l4+6 {
			sport = uint16(b[l4])<<8 | uint16(b[l4+1])
			dport = uint16(b[l4+4])<<8 | uint16(b[l4+5])
		}
	}
	return
}

// push and pop keep e.heap a min-heap by (due, seq); callers hold e.mu.
func (e *Emulator) push(f *frame) { e.heap = heapq.Push(e.heap, f, frameLessP) }

func (e *Emulator) pop() (f *frame) {
	e.heap, f = heapq.Pop(e.heap, frameLessP)
	return f
}

func frameLessP(a, b **frame) bool { return frameLess(*a, *b) }

func frameLess(a, b *frame) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return a.seq < b.seq
}

// String describes the emulator for logs.
func (e *Emulator) String() string {
	return fmt.Sprintf("linkem %s<->%s (%d forward classes, %d reverse classes)", e.cfg.A, e.cfg.B,
		len(e.cfg.Forward.Classes), len(e.cfg.Reverse.Classes))
}
