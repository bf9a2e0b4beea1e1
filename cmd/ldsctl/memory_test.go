package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
)

// TestWriteRing: ldsctl memory says how long the default ring holds
// traffic, at low rates (its blocks and block timeout) and at a given
// packet rate (its bytes: 192 a frame with the default snap length, 1584
// for a whole 1500-byte frame).
func TestWriteRing(t *testing.T) {
	rc := config.DefaultReceiver()
	src := rc.Capture.Source
	src.Kind = "afpacket"
	whole := src
	whole.Snaplen = 65535
	for _, tc := range []struct {
		src   capture.SourceConfig
		pps   float64
		frame int
		want  []string
	}{
		{src, 1800, 1000, []string{"1 × 256 × 256 KiB = 64 MiB", "keeping 104 bytes of each frame", "holds 12.8s of traffic at low packet rates", "12.8s at 1800 packets/s of 1000 bytes (192 ring bytes each)"}},
		{src, 150e3, 1500, []string{"2.133s at 150000 packets/s of 1500 bytes (192 ring bytes each)"}},
		{src, 1e6, 1500, []string{"holds 12.8s of traffic at low packet rates", "346ms at 1000000 packets/s of 1500 bytes"}},
		{whole, 1e6, 1500, []string{"keeping 65535 bytes of each frame", "42ms at 1000000 packets/s of 1500 bytes (1584 ring bytes each)"}},
	} {
		var b bytes.Buffer
		writeRing(&b, tc.src, rc.Capture.Identity, tc.pps, tc.frame)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("pps %v: %q lacks %q", tc.pps, b.String(), w)
			}
		}
	}
	var b bytes.Buffer
	src.Kind = "file"
	if writeRing(&b, src, rc.Capture.Identity, 1, 1); b.Len() != 0 {
		t.Errorf("a file source has no ring, got %q", b.String())
	}
}
