package linkem

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/match"
)

func TestDelayDistributions(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name     string
		d        Delay
		lo, hi   time.Duration // every draw inside
		wantMean float64       // ns, analytic
		tol      float64       // relative tolerance on the mean
	}{
		{"constant", Delay{Kind: "constant", Value: 700 * us}, 700 * us, 700 * us, 700e3, 0},
		{"uniform", Delay{Kind: "uniform", Min: 1000 * us, Max: 3000 * us}, 1000 * us, 3000 * us, 2000e3, 0.01},
		{"bimodal", Delay{Kind: "bimodal", P: 0.3, A: 500 * us, B: 4000 * us, Spread: 200 * us}, 500 * us, 4200 * us,
			0.3*600e3 + 0.7*4100e3, 0.01},
		// Lomax mean Scale/(Shape-1) = 200µs/1.5; the cap (50*Scale) trims a
		// negligible part of the tail at shape 2.5.
		{"pareto", Delay{Kind: "pareto", Base: 1000 * us, Scale: 200 * us, Shape: 2.5}, 1000 * us, 11000 * us,
			1000e3 + 200e3/1.5, 0.02},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.d.validate("d"); err != nil {
				t.Fatal(err)
			}
			s := sampler{tc.d}
			rng := rand.New(rand.NewPCG(1, 2))
			const n = 200000
			var sum float64
			for range n {
				v := s.draw(rng)
				if v < int64(tc.lo) || v > int64(tc.hi) {
					t.Fatalf("draw %v outside [%v, %v]", time.Duration(v), tc.lo, tc.hi)
				}
				sum += float64(v)
			}
			mean := sum / n
			if math.Abs(mean-tc.wantMean) > tc.tol*tc.wantMean+1 {
				t.Fatalf("mean %.0f ns, want %.0f ±%.1f%%", mean, tc.wantMean, tc.tol*100)
			}
			if got := tc.d.minimum(); got != tc.lo {
				t.Fatalf("minimum %v, want %v", got, tc.lo)
			}
		})
	}
}

func TestLossRates(t *testing.T) {
	tests := []struct {
		name string
		l    Loss
		want float64 // analytic long-run rate
	}{
		{"none", Loss{}, 0},
		{"uniform", Loss{Kind: "uniform", P: 0.05}, 0.05},
		// Stationary P(bad) = 0.01/(0.01+0.1); loss = P(bad)*0.5.
		{"gilbert", Loss{Kind: "gilbert", PGB: 0.01, PBG: 0.1, LossBad: 0.5}, 0.01 / 0.11 * 0.5},
		{"gilbert-both", Loss{Kind: "gilbert", PGB: 0.02, PBG: 0.2, LossGood: 0.001, LossBad: 0.8},
			(0.2*0.001 + 0.02*0.8) / 0.22},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.validate("l"); err != nil {
				t.Fatal(err)
			}
			if r := tc.l.Rate(); math.Abs(r-tc.want) > 1e-12 {
				t.Fatalf("Rate() = %v, want %v", r, tc.want)
			}
			st := lossState{l: tc.l}
			rng := rand.New(rand.NewPCG(3, 4))
			const n = 1000000
			lost, runs, inRun := 0, 0, false
			for range n {
				if st.lost(rng) {
					lost++
					if !inRun {
						runs++
					}
					inRun = true
				} else {
					inRun = false
				}
			}
			got := float64(lost) / n
			// Bursty losses are correlated: allow several binomial sigmas
			// times the mean burst length.
			burst := 1.0
			if runs > 0 {
				burst = float64(lost) / float64(runs)
			}
			sigma := math.Sqrt(tc.want*(1-tc.want)/n) * math.Sqrt(burst) * 3
			if math.Abs(got-tc.want) > 5*sigma+1e-9 {
				t.Fatalf("loss rate %.5f, want %.5f ± %.5f", got, tc.want, 5*sigma)
			}
			if tc.l.Kind == "gilbert" && burst < 1.5 {
				t.Fatalf("mean loss burst %.2f: Gilbert–Elliott losses should come in bursts", burst)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := func() Config {
		c := DefaultConfig()
		c.A, c.B = "a0", "b0"
		c.Forward.Classes = []Class{{Name: "udp", Match: match.Rule{Proto: []int{17}},
			Delay: Delay{Kind: "uniform", Min: time.Millisecond, Max: 2 * time.Millisecond},
			Loss:  Loss{Kind: "gilbert", PGB: 0.01, PBG: 0.2, LossBad: 0.5}}}
		return c
	}
	tests := []struct {
		name    string
		mut     func(*Config)
		wantErr string // "" = valid
	}{
		{"ok", func(*Config) {}, ""},
		{"same-interface", func(c *Config) { c.B = c.A }, "two interfaces"},
		{"no-interface", func(c *Config) { c.A = "" }, "linkem.a"},
		{"bad-kind", func(c *Config) { c.Forward.Classes[0].Delay.Kind = "gauss" }, "forward.classes[0].delay.kind"},
		{"uniform-backwards", func(c *Config) { c.Forward.Classes[0].Delay.Max = 0 }, "below min"},
		{"pareto-shape", func(c *Config) { c.Forward.Classes[0].Delay = Delay{Kind: "pareto", Scale: 1} }, "shape"},
		{"loss-prob", func(c *Config) { c.Forward.Classes[0].Loss = Loss{Kind: "uniform", P: 1.5} }, "loss.p"},
		{"gilbert-stuck", func(c *Config) { c.Forward.Classes[0].Loss.PBG = 0 }, "p_bg"},
		{"bad-rule", func(c *Config) { c.Reverse.Classes = []Class{{Match: match.Rule{DPort: []string{"x"}}}} }, "reverse.classes[0].match"},
		{"spin", func(c *Config) { c.Spin = time.Second }, "spin"},
		{"huge-delay", func(c *Config) { c.Forward.Classes[0].Delay = Delay{Value: time.Minute} }, "value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok()
			tc.mut(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestHeapOrder checks the release order against a sort of the same
// (due, seq) pairs: earliest due first, arrival order among equal dues.
func TestHeapOrder(t *testing.T) {
	e := &Emulator{}
	rng := rand.New(rand.NewPCG(5, 6))
	var want []*frame
	for i := range 5000 {
		f := &frame{due: rng.Int64N(300), seq: uint64(i)}
		want = append(want, f)
		e.push(f)
		if i%7 == 0 { // interleave pops, like the scheduler does
			got := e.pop()
			j := slices.IndexFunc(want, func(x *frame) bool { return x == got })
			for _, x := range want {
				if frameLess(x, got) {
					t.Fatalf("popped due %d seq %d while due %d seq %d was held", got.due, got.seq, x.due, x.seq)
				}
			}
			want = slices.Delete(want, j, j+1)
		}
	}
	slices.SortFunc(want, func(a, b *frame) int {
		if frameLess(a, b) {
			return -1
		}
		return 1
	})
	for i, w := range want {
		if g := e.pop(); g != w {
			t.Fatalf("pop %d: due %d seq %d, want due %d seq %d", i, g.due, g.seq, w.due, w.seq)
		}
	}
	if len(e.heap) != 0 {
		t.Fatalf("%d frames left", len(e.heap))
	}
}

func TestParseFrame(t *testing.T) {
	v4 := buildUDP4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 4000, 53, 8)
	vlan := append(append(append([]byte{}, v4[:12]...), 0x81, 0x00, 0x00, 0x07), v4[12:]...)
	frag := slices.Clone(v4)
	frag[14+7] = 10 // fragment offset != 0: no ports
	v6 := make([]byte, 14+40+8)
	v6[12], v6[13] = 0x86, 0xdd
	v6[14+6] = 6
	a6 := netip.MustParseAddr("2001:db8::1").As16()
	b6 := netip.MustParseAddr("2001:db8::2").As16()
	copy(v6[14+8:], a6[:])
	copy(v6[14+24:], b6[:])
	binary.BigEndian.PutUint16(v6[54:], 443)
	binary.BigEndian.PutUint16(v6[56:], 51000)
	arp := make([]byte, 42)
	arp[12], arp[13] = 0x08, 0x06
	tests := []struct {
		name         string
		b            []byte
		ok           bool
		src, dst     string
		proto        uint8
		sport, dport uint16
	}{
		{"udp4", v4, true, "198.18.0.1", "198.18.0.2", 17, 4000, 53},
		{"vlan", vlan, true, "198.18.0.1", "198.18.0.2", 17, 4000, 53},
		{"fragment", frag, true, "198.18.0.1", "198.18.0.2", 17, 0, 0},
		{"tcp6", v6, true, "2001:db8::1", "2001:db8::2", 6, 443, 51000},
		{"arp", arp, false, "", "", 0, 0, 0},
		{"short", v4[:20], false, "", "", 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, d, p, sp, dp, ok := parseFrame(tc.b)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if s.String() != tc.src || d.String() != tc.dst || p != tc.proto || sp != tc.sport || dp != tc.dport {
				t.Fatalf("got %v %v %d %d %d", s, d, p, sp, dp)
			}
		})
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add(buildUDP4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 1, 2, 8))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _, _, _, _ = parseFrame(b) // must not panic on any input
	})
}

func FuzzCmsgTimestamp(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 32))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = cmsgTimestamp(b) // must not panic on any input
	})
}

// buildUDP4 makes an Ethernet/IPv4/UDP frame with a payload of n bytes.
func buildUDP4(src, dst netip.Addr, sport, dport uint16, n int) []byte {
	b := make([]byte, 14+20+8+n)
	copy(b[0:6], []byte{0x02, 0, 0, 0, 0, 2})
	copy(b[6:12], []byte{0x02, 0, 0, 0, 0, 1})
	b[12], b[13] = 0x08, 0x00
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+n))
	ip[8] = 64
	ip[9] = 17
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+n))
	return b
}

// TestPacketPathAllocs proves the per-frame work outside the syscalls
// (classify, delay and loss draws, heap push and pop) allocates nothing.
func TestPacketPathAllocs(t *testing.T) {
	rule, err := match.Rule{Proto: []int{17}, DPort: []string{"53"}}.Compile("r")
	if err != nil {
		t.Fatal(err)
	}
	cs := []class{{rule: rule, s: sampler{Delay{Kind: "pareto", Base: time.Millisecond, Scale: time.Microsecond, Shape: 2}},
		loss: lossState{l: Loss{Kind: "gilbert", PGB: 0.1, PBG: 0.5, LossBad: 0.5}}}}
	b := buildUDP4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), 4000, 53, 64)
	rng := rand.New(rand.NewPCG(1, 1))
	e := &Emulator{heap: make([]*frame, 0, 16)}
	f := &frame{}
	allocs := testing.AllocsPerRun(1000, func() {
		i := classify(cs, b)
		if i != 0 {
			panic("no class")
		}
		_ = cs[i].loss.lost(rng)
		f.due = cs[i].s.draw(rng)
		e.push(f)
		_ = e.pop()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per frame, want 0", allocs)
	}
}
