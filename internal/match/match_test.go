package match

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCompileErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		rule Rule
		want string
	}{
		{Rule{Src: []string{"10.0.0.0/33"}}, "r.src"},
		{Rule{Dst: []string{"nope"}}, "r.dst"},
		{Rule{Proto: []int{256}}, "r.proto[0]"},
		{Rule{SPort: []string{"70000"}}, "r.sport"},
		{Rule{DPort: []string{"9-1"}}, "r.dport"},
	}
	for _, c := range cases {
		_, err := c.rule.Compile("r")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want mention of %q", c.rule, err, c.want)
		}
	}
}

func TestMatch(t *testing.T) {
	r, err := Rule{Src: []string{"10.0.0.0/8", "2001:db8::/32"}, Proto: []int{6, 17}, DPort: []string{"443", "8000-8100"}}.Compile("r")
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	cases := []struct {
		src   string
		proto uint8
		dport uint16
		want  bool
	}{
		{"10.1.2.3", 6, 443, true},
		{"10.1.2.3", 17, 8050, true},
		{"10.1.2.3", 17, 8101, false},
		{"11.1.2.3", 6, 443, false},
		{"2001:db8::5", 6, 8000, true},
		{"2001:db9::5", 6, 8000, false},
		{"10.1.2.3", 1, 443, false},
	}
	for _, c := range cases {
		if got := r.Match(a(c.src), a("192.0.2.1"), c.proto, 1234, c.dport); got != c.want {
			t.Errorf("%s proto %d dport %d: got %v want %v", c.src, c.proto, c.dport, got, c.want)
		}
	}
	// A bare address is a host prefix; an IPv4-mapped prefix is unmapped.
	h, _ := Rule{Dst: []string{"::ffff:192.0.2.1"}}.Compile("h")
	if !h.Match(a("1.1.1.1"), a("192.0.2.1"), 6, 1, 1) || h.Match(a("1.1.1.1"), a("192.0.2.2"), 6, 1, 1) {
		t.Error("host rule mismatch")
	}
	if First([]Compiled{r, h}, a("1.1.1.1"), a("192.0.2.1"), 6, 1, 1) != 1 {
		t.Error("First should pick the second rule")
	}
}
