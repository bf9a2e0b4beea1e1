package capture

import "testing"

// TestRingGeometry checks the split of small rings against geometries
// worked out by hand: same bytes, blocks halved until there are 32 or a
// block would drop under 32 KiB or stop being whole pages.
func TestRingGeometry(t *testing.T) {
	for _, c := range []struct {
		name           string
		bs, nb         int
		wantBS, wantNB int
	}{
		{"tcpdump -B 1024 geometry", 256 << 10, 4, 32 << 10, 32},
		{"default ring untouched", 1 << 20, 64, 1 << 20, 64},
		{"32 blocks already", 1 << 20, 32, 1 << 20, 32},
		{"one big block", 1 << 20, 1, 32 << 10, 32},
		{"stops at 32 blocks", 256 << 10, 8, 64 << 10, 32},
		{"odd count", 1 << 20, 3, 64 << 10, 48},
		{"floor: 64 KiB splits once", 64 << 10, 2, 32 << 10, 4},
		{"floor: 32 KiB blocks stay", 32 << 10, 4, 32 << 10, 4},
		{"small blocks stay", 4096, 1, 4096, 1},
		{"half would not be whole pages", 66 << 12, 1, 33 << 12, 2},
		{"neither", 3 << 12, 1, 3 << 12, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			bs, nb := RingGeometry(c.bs, c.nb)
			if bs != c.wantBS || nb != c.wantNB {
				t.Errorf("RingGeometry(%d, %d) = %d × %d, want %d × %d", c.bs, c.nb, nb, bs, c.wantNB, c.wantBS)
			}
		})
	}
}

// TestRingGeometryKeepsBytes: over a grid of valid configurations the
// ring keeps its bytes, blocks stay whole pages, and nothing already at
// minRingBlocks+ blocks or at the minRingBlock floor is touched.
func TestRingGeometryKeepsBytes(t *testing.T) {
	for pages := 1; pages <= 1024; pages++ {
		for _, nb := range []int{1, 2, 3, 4, 5, 8, 15, 16, 17, 31, 32, 33, 64} {
			cbs := pages * 4096
			bs, n := RingGeometry(cbs, nb)
			if bs*n != cbs*nb {
				t.Fatalf("%d × %d: ring of %d bytes became %d × %d = %d", nb, cbs, cbs*nb, n, bs, bs*n)
			}
			if bs%4096 != 0 || bs < 4096 {
				t.Fatalf("%d × %d: block %d is not whole pages", nb, cbs, bs)
			}
			if (nb >= minRingBlocks || cbs <= minRingBlock) && (bs != cbs || n != nb) {
				t.Fatalf("%d × %d changed to %d × %d; only rings of < %d blocks over %d bytes are split", nb, cbs, n, bs, minRingBlocks, minRingBlock)
			}
			if bs < minRingBlock && bs != cbs {
				t.Fatalf("%d × %d: split below %d bytes (%d)", nb, cbs, minRingBlock, bs)
			}
		}
	}
}
