package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/config"
)

// TestWriteRing: ldsctl memory says how long the default ring holds
// traffic, at low rates (its blocks and block timeout) and at a given
// packet rate (its bytes).
func TestWriteRing(t *testing.T) {
	src := config.DefaultReceiver().Capture.Source
	src.Kind = "afpacket"
	for _, tc := range []struct {
		pps   float64
		frame int
		want  []string
	}{
		{1800, 1000, []string{"1 × 256 × 256 KiB = 64 MiB", "holds 2.56s of traffic at low packet rates", "2.56s at 1800 packets/s of 1000 bytes"}},
		{1e6, 1500, []string{"holds 2.56s of traffic at low packet rates", "42ms at 1000000 packets/s of 1500 bytes"}},
	} {
		var b bytes.Buffer
		writeRing(&b, src, tc.pps, tc.frame)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("pps %v: %q lacks %q", tc.pps, b.String(), w)
			}
		}
	}
	var b bytes.Buffer
	src.Kind = "file"
	if writeRing(&b, src, 1, 1); b.Len() != 0 {
		t.Errorf("a file source has no ring, got %q", b.String())
	}
}
