package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// linkState is what the kernel says of an interface at one moment.
type linkState struct {
	exists bool
	index  int
	up     bool // administratively up and running (carrier)
	mtu    int
}

// linkWatch follows one capture interface by name: its state through
// ioctls on a socket made in the capture's network namespace (so any
// thread may ask), and the outages it has been through.
type linkWatch struct {
	ifname       string
	ctl          int // AF_INET datagram socket, in the capture's network namespace
	ifr          *unix.Ifreq
	ns           *os.File // that namespace, to re-open the capture socket in it
	nsDev, nsIno uint64
	bound        int    // index of the interface the capture socket is bound to
	lastErr      string // last re-open error logged

	mu       sync.Mutex // report is called from Stats' goroutine
	known    bool
	up       bool
	downs    uint64
	downAt   time.Time
	reported bool // this worker logs and reports the link (worker 0)
}

func (l *linkWatch) init(ifname string) error {
	l.ifname = ifname
	ifr, err := unix.NewIfreq(ifname)
	if err != nil {
		return fmt.Errorf("capture.source.interface: %w", err)
	}
	l.ifr = ifr
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	l.ctl = fd
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if f, err := os.Open("/proc/thread-self/ns/net"); err == nil {
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil {
			l.ns, l.nsDev, l.nsIno = f, st.Dev, st.Ino
		} else {
			_ = f.Close()
		}
	}
	return nil
}

func (l *linkWatch) close() error {
	var errs []error
	if l.ctl > 0 {
		errs = append(errs, unix.Close(l.ctl))
		l.ctl = -1
	}
	if l.ns != nil {
		errs = append(errs, l.ns.Close())
		l.ns = nil
	}
	return errors.Join(errs...)
}

// state asks the kernel about the interface now; it allocates nothing
// (the ioctls leave the name in the request).
func (l *linkWatch) state() linkState {
	var st linkState
	ifr := l.ifr
	if unix.IoctlIfreq(l.ctl, unix.SIOCGIFINDEX, ifr) != nil {
		return st
	}
	st.exists, st.index = true, int(ifr.Uint32())
	if unix.IoctlIfreq(l.ctl, unix.SIOCGIFFLAGS, ifr) == nil {
		f := ifr.Uint16()
		st.up = f&unix.IFF_UP != 0 && f&unix.IFF_RUNNING != 0
	}
	if unix.IoctlIfreq(l.ctl, unix.SIOCGIFMTU, ifr) == nil {
		st.mtu = int(ifr.Uint32())
	}
	return st
}

// changed records st; on a change of state it counts an outage and (for
// the reporting worker) logs once.
func (l *linkWatch) changed(st linkState, report bool, log *slog.Logger) {
	up := st.exists && st.up
	l.mu.Lock()
	first, was := !l.known, l.up
	l.known, l.up, l.reported = true, up, report
	if !first && up == was {
		l.mu.Unlock()
		return
	}
	var outage time.Duration
	if !up {
		l.downs++
		l.downAt = time.Now()
	} else if !first {
		outage = time.Since(l.downAt).Round(time.Millisecond)
	}
	l.mu.Unlock()
	if !report {
		return
	}
	switch {
	case !st.exists:
		log.Warn("capture interface does not exist: waiting for it (check capture.source.interface and the network namespace); intervals are flagged partial until it is up",
			"interface", l.ifname)
	case !up:
		log.Warn("capture interface is down: waiting for it; intervals are flagged partial until it is up",
			"interface", l.ifname)
	case !first:
		log.Info("capture interface is up: capture resumed", "interface", l.ifname, "outage", outage)
	}
}

// report returns the outages so far and the current state.
func (l *linkWatch) report() (uint64, LinkState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.known:
		return l.downs, LinkUnknown
	case l.up:
		return l.downs, LinkUp
	}
	return l.downs, LinkDown
}

// inNS runs fn in the capture's network namespace: directly when the
// calling thread is in it (always, in a daemon), else on a thread moved
// there for fn and discarded after.
func (l *linkWatch) inNS(fn func() error) error {
	runtime.LockOSThread()
	var st unix.Stat_t
	same := l.ns == nil || (unix.Stat("/proc/thread-self/ns/net", &st) == nil && st.Dev == l.nsDev && st.Ino == l.nsIno)
	if same {
		defer runtime.UnlockOSThread()
		return fn()
	}
	runtime.UnlockOSThread()
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine instead of
		// going back to the scheduler in another namespace.
		runtime.LockOSThread()
		if err := unix.Setns(int(l.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("entering the capture's network namespace: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// checkLink looks at the interface after a socket error or an idle poll:
// a deleted or re-created interface closes the ring (ReadPacket opens
// it again when the interface is there); a state change is recorded.
func (s *afSource) checkLink() error {
	st := s.link.state()
	if s.fd >= 0 && (!st.exists || st.index != s.link.bound) {
		_ = s.closeRing()
	}
	if st.exists && st.mtu > 0 {
		s.maxFrame = st.mtu + 14
	}
	s.linkDown = !st.exists || !st.up
	s.link.changed(st, s.reportIf, s.log)
	return ErrTimeout
}

// reopen tries to open the ring on an interface that was missing or
// re-created. It returns nil when the ring is open, ErrTimeout after
// waiting a poll timeout for the interface, or a refusal
// (ErrCoalescing) that ends the capture.
func (s *afSource) reopen() error {
	st := s.link.state()
	if st.exists {
		err := s.link.inNS(func() error { return s.open(st) })
		if err == nil {
			s.link.lastErr = ""
			return nil
		}
		if errors.Is(err, ErrCoalescing) {
			return err
		}
		if msg := err.Error(); msg != s.link.lastErr {
			s.link.lastErr = msg
			s.log.Warn("capture interface is back but the capture cannot open on it yet; retrying", "interface", s.ifname, "err", err)
		}
	}
	s.linkDown = true
	s.link.changed(st, s.reportIf, s.log)
	time.Sleep(time.Duration(s.pollMS) * time.Millisecond)
	return ErrTimeout
}

// countOversize counts a frame longer than the interface's MTU plus the
// Ethernet header (one 802.1Q tag left in the frame is allowed): a
// coalesced super-packet. The first one is logged.
func (s *afSource) countOversize(frame []byte, wireLen int) {
	if wireLen <= s.maxFrame+4 && len(frame) >= 14 {
		if et := be16(frame[12:]); et == etVLAN || et == etQinQ || et == etQinQ2 {
			return
		}
	}
	if s.oversize.Add(1) == 1 {
		s.log.Warn("capture frame longer than the interface MTU: packets are coalesced before the capture (GRO/LRO here, or segmentation offload on a virtual link); counted in lds_capture_oversize_frames_total",
			"interface", s.ifname, "frame_bytes", wireLen, "max_frame_bytes", s.maxFrame,
			"turn_off", OffloadOffCommand(s.ifname, nil))
	}
}
