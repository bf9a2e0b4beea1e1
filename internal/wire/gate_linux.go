package wire

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// queuedBytes is what the peer has sent that is not read yet (the socket's
// receive queue), 0 when unknown.
func queuedBytes(c net.Conn) int64 {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	var n int
	_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return int64(n)
}

// deferAccept makes the kernel hand a connection to accept() only once
// its first data has arrived (TCP_DEFER_ACCEPT), or after d: a socket
// that sends nothing waits in the kernel's SYN queue, never in the gate's
// pool. TLS and HTTP/2 clients speak first, so a sender is not delayed.
func deferAccept(lis net.Listener, d time.Duration) error {
	tl, ok := lis.(*net.TCPListener)
	if !ok {
		return nil
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, max(int(d/time.Second), 1))
	}); err != nil {
		return err
	}
	return serr
}
