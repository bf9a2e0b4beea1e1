package testutil

import (
	"runtime"
	"syscall"
	"testing"
)

// ThreadCPU is the calling thread's CPU time (user + system, ns): on a
// loaded machine it leaves out the time a benchmark waited for a core,
// which wall-clock ns/op counts. Pin the goroutine (runtime.LockOSThread)
// for the thread's time to be its own.
func ThreadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// ProcessCPU is the process's CPU time (user + system, ns, all threads):
// unlike ThreadCPU it counts the work the runtime does for the caller on
// other threads (the collector's background marking).
func ProcessCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
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
