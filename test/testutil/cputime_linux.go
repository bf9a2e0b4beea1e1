package testutil

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// ThreadCPU is the calling thread's CPU time (user + system, ns): on a
// loaded machine it leaves out the time a benchmark waited for a core,
// which wall-clock ns/op counts. Pin the goroutine (runtime.LockOSThread)
// for the thread's time to be its own.
//
// It reads the thread's CPU clock, exact to the ns. getrusage's user and
// system times are not: the kernel splits the thread's run time between
// them by tick samples, so that their sum moves in steps of up to a few
// ms, which alone would swing a ratio of two 30 ms chunks by ±15 %.
func ThreadCPU() int64 { return cpuClock(unix.CLOCK_THREAD_CPUTIME_ID) }

// ProcessCPU is the process's CPU time (user + system, ns, all threads):
// unlike ThreadCPU it counts the work the runtime does for the caller on
// other threads (the collector's background marking).
func ProcessCPU() int64 { return cpuClock(unix.CLOCK_PROCESS_CPUTIME_ID) }

func cpuClock(id int32) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// CPUMeter pins the benchmark's goroutine to its thread and returns the
// function that reports the thread's CPU time per op ("cpu-ns/op") since
// the call; call it when the timed loop ends.
func CPUMeter(b *testing.B) func() {
	runtime.LockOSThread()
	t0 := ThreadCPU()
	return func() {
		b.ReportMetric(float64(ThreadCPU()-t0)/float64(b.N), "cpu-ns/op")
		runtime.UnlockOSThread()
	}
}
