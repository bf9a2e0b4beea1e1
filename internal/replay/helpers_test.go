package replay

import (
	"net/netip"
	"testing"

	"github.com/lds-net/lds/internal/eval"
	"github.com/lds-net/lds/internal/results"
)

func readJSONL(t *testing.T, path string) []results.FlowRecord {
	t.Helper()
	recs, err := eval.ReadResultsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
