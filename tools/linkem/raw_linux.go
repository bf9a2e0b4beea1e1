package linkem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawSock is an AF_PACKET SOCK_RAW socket bound to one interface.
type rawSock struct {
	fd      int
	ifname  string
	ifindex int
	mtu     int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// openRaw opens a packet socket on ifname in the calling thread's network
// namespace. It is created with protocol 0 (receives nothing) and bound
// with ETH_P_ALL to the interface, so no frame of another interface slips
// in between socket() and bind(). Frames the host sends on the interface
// (our own writes) are not delivered back (PACKET_IGNORE_OUTGOING).
func openRaw(ifname string, bufBytes int, recvTimeout time.Duration) (*rawSock, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("linkem: interface %q: %w (does it exist in this network namespace?)", ifname, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("linkem: AF_PACKET socket (needs CAP_NET_RAW): %w", err)
	}
	s := &rawSock{fd: fd, ifname: ifname, ifindex: ifc.Index, mtu: ifc.MTU}
	fail := func(what string, err error) (*rawSock, error) {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("linkem: %s on %q: %w", what, ifname, err)
	}
	if bufBytes > 0 {
		// FORCE variants pass rmem_max/wmem_max (we run as root).
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, bufBytes); err != nil {
			return fail("SO_RCVBUFFORCE", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, bufBytes); err != nil {
			return fail("SO_SNDBUFFORCE", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("SO_TIMESTAMPNS", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		return fail("PACKET_IGNORE_OUTGOING (kernel >= 4.20)", err)
	}
	if recvTimeout > 0 {
		tv := unix.NsecToTimeval(recvTimeout.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return fail("SO_RCVTIMEO", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index}); err != nil {
		return fail("bind", err)
	}
	return s, nil
}

func (s *rawSock) close() error { return unix.Close(s.fd) }

// write sends one whole frame out of the bound interface.
func (s *rawSock) write(b []byte) error {
	for {
		_, err := unix.Write(s.fd, b)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// recvState holds the recvmsg buffers of one reader, reused for every
// frame so that reading allocates nothing.
type recvState struct {
	msg  unix.Msghdr
	iov  unix.Iovec
	from unix.RawSockaddrLinklayer
	oob  [128]byte
}

// errTimeout is returned by recv when SO_RCVTIMEO expired.
var errTimeout = errors.New("linkem: receive timeout")

// recv reads one frame into buf. It returns the frame's full length (may
// exceed len(buf): truncated), its kernel receive time (Unix ns) and
// whether the host itself sent it.
func (s *rawSock) recv(st *recvState, buf []byte) (n int, tsNS int64, outgoing bool, err error) {
	st.iov.Base = &buf[0]
	st.iov.SetLen(len(buf))
	st.msg.Name = (*byte)(unsafe.Pointer(&st.from))
	st.msg.Namelen = unix.SizeofSockaddrLinklayer
	st.msg.Iov = &st.iov
	st.msg.SetIovlen(1)
	st.msg.Control = &st.oob[0]
	st.msg.SetControllen(len(st.oob))
	st.msg.Flags = 0
	for {
		r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&st.msg)), unix.MSG_TRUNC)
		runtime.KeepAlive(buf)
		switch e {
		case 0:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, 0, false, errTimeout
		default:
			return 0, 0, false, fmt.Errorf("linkem: recvmsg on %q: %w", s.ifname, e)
		}
		n = int(r)
		break
	}
	tsNS = cmsgTimestamp(st.oob[:st.msg.Controllen])
	if tsNS == 0 {
		tsNS = time.Now().UnixNano() // no kernel stamp: the best we have
	}
	return n, tsNS, st.from.Pkttype == unix.PACKET_OUTGOING, nil
}

// cmsgTimestamp finds SCM_TIMESTAMPNS in a control buffer without the
// allocations of unix.ParseSocketControlMessage.
func cmsgTimestamp(b []byte) int64 {
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			return 0
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= unix.SizeofCmsghdr+16 {
			d := b[unix.SizeofCmsghdr:]
			sec := int64(binary.NativeEndian.Uint64(d[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(d[8:16]))
			return sec*1e9 + nsec
		}
		adv := unix.CmsgSpace(l - unix.SizeofCmsghdr)
		if adv > len(b) {
			return 0
		}
		b = b[adv:]
	}
	return 0
}

// InNetns runs fn on an OS thread moved into the network namespace at
// path (e.g. /var/run/netns/NAME); "" runs fn where the caller is.
// Sockets that fn opens stay in that namespace and may be used from any
// goroutine afterwards. The thread is moved back when fn returns; if that
// fails it is never returned to the Go scheduler and exits with the
// goroutine.
func InNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("linkem: open own network namespace: %w", err)
			return
		}
		defer func() { _ = back.Close() }()
		f, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("linkem: open network namespace: %w", err)
			return
		}
		defer func() { _ = f.Close() }()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("linkem: setns %s (needs CAP_SYS_ADMIN): %w", path, err)
			return
		}
		err = fn()
		// A thread that dies can take children with it (Pdeathsig follows
		// the forking thread), so give it back only once it is home again.
		if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// preciseThread makes the calling goroutine's thread sleep precisely:
// it must stay locked to it, and its timer slack goes from the default
// 50 µs to 1 ns, so clock_nanosleep wakes up on time.
func preciseThread() error {
	runtime.LockOSThread()
	return unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
}

// sleepUntil sleeps until CLOCK_MONOTONIC reads tNS (absolute).
func sleepUntil(tNS int64) {
	ts := unix.NsecToTimespec(tNS)
	for {
		// A signal interrupts the sleep: sleep again towards the same deadline.
		if err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
