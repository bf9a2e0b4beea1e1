//go:build !linux

package testutil

import "testing"

// ThreadCPU is 0 where the thread's CPU time is not at hand.
func ThreadCPU() int64 { return 0 }

// ProcessCPU is 0 where the process's CPU time is not at hand.
func ProcessCPU() int64 { return 0 }

// CPUMeter reports nothing where the thread's CPU time is not at hand.
func CPUMeter(*testing.B) func() { return func() {} }
