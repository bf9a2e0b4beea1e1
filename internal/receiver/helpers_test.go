package receiver_test

import (
	"net/netip"
	"testing"

	"github.com/lds-net/lds/internal/capture"
)

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

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
