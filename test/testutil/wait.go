package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond every 5 ms until it holds. It fails the test once d
// has passed: the deadline only turns a hang into a failure, what the
// test waits for is cond.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
