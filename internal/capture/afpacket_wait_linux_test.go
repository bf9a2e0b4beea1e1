package capture

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWaitBlockReadyAfterDeadline checks that a block the kernel handed
// over is taken whatever the poller says: a read deadline already past
// when the wait starts (as after a SIGSTOP longer than poll_timeout) ends
// the poller's Read before its check, and reporting an idle ring then
// would let tap advance its watermark over packets still in the ring. A
// pipe stands in for the socket in the poller and a one-block ring in
// memory for the kernel's.
func TestWaitBlockReadyAfterDeadline(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatalf("pipe: %v", err)
	}
	w := os.NewFile(uintptr(p[1]), "pipe-w")
	defer w.Close()
	for _, c := range []struct {
		name   string
		pollMS int // 0: the deadline has passed when Read starts
	}{
		{"deadline passed", 0},
		{"deadline ahead", 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			fd, err := unix.Dup(p[0])
			if err != nil {
				t.Fatalf("dup: %v", err)
			}
			f := os.NewFile(uintptr(fd), "pipe-r")
			defer f.Close()
			rc, err := f.SyscallConn()
			if err != nil {
				t.Fatalf("raw conn: %v", err)
			}
			s := &afSource{fd: fd, file: f, rc: rc, ring: make([]byte, 4096), bs: 4096, nb: 1, pollMS: c.pollMS, ifname: "test"}
			s.ready = s.readyCheck
			s.blockHdr(0).Block_status = unix.TP_STATUS_USER
			if err := s.waitBlock(); err != nil {
				t.Fatalf("waitBlock with the block ours: %v, want nil (the block taken)", err)
			}
		})
	}
}
