package receiver_test

import (
	"testing"

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
