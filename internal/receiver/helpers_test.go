package receiver_test

import (
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
)

func readFirstTS(t *testing.T, path string) int64 {
	t.Helper()
	src, err := capture.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, ts, _, err := src.ReadPacket(make([]byte, 65536))
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// traceClock is a receiver clock standing at a generated trace's start:
// receiver.max_interval_skew then judges its intervals as a live receiver
// judges current ones.
func traceClock(startNS int64) func() time.Time {
	return func() time.Time { return time.Unix(0, startNS) }
}

// testSeed is the tests' sketch.seed (as `openssl rand -hex 16` makes one).
const testSeed = "8d41c0f3a95e27b6d0c1f4a8e3b79265"
