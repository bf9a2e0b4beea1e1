package prefetch

import (
	"testing"
	"unsafe"
)

// TestLines: prefetching real addresses, none, and addresses that are not
// mapped returns without a fault and changes nothing.
func TestLines(t *testing.T) {
	buf := make([]uint64, 1024)
	for i := range buf {
		buf[i] = uint64(i)
	}
	var addrs []uintptr
	for i := 0; i < len(buf); i += 8 {
		addrs = append(addrs, uintptr(unsafe.Pointer(&buf[i])))
	}
	for _, tc := range []struct {
		name  string
		addrs []uintptr
	}{
		{"none", nil},
		{"mapped", addrs},
		{"unmapped", []uintptr{0, 8, 1 << 47, ^uintptr(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Lines(tc.addrs)
			for i := range buf {
				if buf[i] != uint64(i) {
					t.Fatalf("buf[%d] = %d after a prefetch", i, buf[i])
				}
			}
		})
	}
}

func BenchmarkLines(b *testing.B) {
	buf := make([]byte, 1<<20)
	addrs := make([]uintptr, 64)
	for i := range addrs {
		addrs[i] = uintptr(unsafe.Pointer(&buf[(i*4099*64)%len(buf)]))
	}
	for b.Loop() {
		Lines(addrs)
	}
}
