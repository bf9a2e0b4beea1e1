package capture

import (
	"cmp"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestCompareText holds CompareText to the order of the text forms it
// stands for, over random IPv4 and IPv6 keys with shared prefixes.
func TestCompareText(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	addr := func() netip.Addr {
		if rng.IntN(3) == 0 {
			var a [16]byte
			a[0], a[1], a[15] = 0x20, 0x01, byte(rng.IntN(20))
			if rng.IntN(2) == 0 {
				a[7] = byte(rng.IntN(3))
			}
			return netip.AddrFrom16(a)
		}
		return netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(3)), byte(rng.IntN(120))})
	}
	keys := make([]FlowKey, 0, 300)
	for len(keys) < cap(keys) {
		s, d := addr(), addr()
		if s.Is4() != d.Is4() {
			continue
		}
		k, err := FlowKeyFromAddrs(s, d, uint8(rng.IntN(3)), uint16(rng.IntN(3)), uint16(rng.IntN(3)))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	for _, a := range keys {
		for _, b := range keys {
			want := cmp.Or(cmp.Compare(a.SrcAddr().String(), b.SrcAddr().String()), cmp.Compare(a.DstAddr().String(), b.DstAddr().String()),
				cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.SPort, b.SPort), cmp.Compare(a.DPort, b.DPort))
			if got := CompareText(a, b); got != want {
				t.Fatalf("CompareText(%v, %v) = %d, want %d", a, b, got, want)
			}
		}
	}
	a, b := MustParseFlowKey("10.0.0.10", "192.0.2.1", 6, 1, 2), MustParseFlowKey("10.0.0.9", "192.0.2.1", 6, 1, 2)
	if n := testing.AllocsPerRun(100, func() { _ = CompareText(a, b) }); n != 0 {
		t.Fatalf("CompareText allocates %v times", n)
	}
	if CompareText(a, b) >= 0 {
		t.Fatal("10.0.0.10 sorts before 10.0.0.9 as text")
	}
}

func TestParseFlowKey(t *testing.T) {
	tests := []struct {
		src, dst string
		ok       bool
	}{
		{"10.0.0.1", "192.0.2.1", true},
		{"2001:db8::1", "2001:db8::2", true},
		{"::ffff:10.0.0.1", "192.0.2.1", true},
		{"10.0.0.1", "2001:db8::2", false},
		{"10.0.0.256", "192.0.2.1", false},
		{"10.0.0.1", "", false},
	}
	for _, tc := range tests {
		k, err := ParseFlowKey(tc.src, tc.dst, 17, 53, 5353)
		if (err == nil) != tc.ok {
			t.Fatalf("%s -> %s: error %v", tc.src, tc.dst, err)
		}
		if err != nil {
			continue
		}
		s, d := netip.MustParseAddr(tc.src).Unmap(), netip.MustParseAddr(tc.dst)
		if k.SrcAddr() != s || k.DstAddr() != d || string(k.AppendSrc(nil)) != s.String() || string(k.AppendDst(nil)) != d.String() ||
			k.Proto != 17 || k.SPort != 53 || k.DPort != 5353 {
			t.Fatalf("%s -> %s: key %v", tc.src, tc.dst, k)
		}
	}
}
