package sample

import (
	"cmp"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// selectBySort is Select's definition written the plain way: every
// candidate sorted by flow, then by X (sampling value, then send time),
// each flow's first k shipped. Select must ship exactly this.
func selectBySort(c *SenderCands, start int64, cfg Config) *Set {
	set := &Set{Limit: c.Limit}
	if ll := cfg.linkLevel(); ll > 0 {
		set.LinkLimit = min(limitOf(ll), c.Limit)
		var link []SenderCand
		for _, x := range c.C {
			if c.S(x) < set.LinkLimit {
				link = append(link, x)
			}
		}
		slices.SortFunc(link, func(a, b SenderCand) int { return cmp.Compare(a.X>>32, b.X>>32) })
		set.Link = makeList(0, c, link)
	}
	if cfg.MaxPerInterval == 0 || len(c.C) == 0 {
		return set
	}
	slices.SortFunc(c.C, func(a, b SenderCand) int { return cmp.Or(cmp.Compare(a.Flow, b.Flow), cmp.Compare(a.X, b.X)) })
	var runs []flowRun
	for i := 0; i < len(c.C); {
		j := i + 1
		for j < len(c.C) && c.C[j].Flow == c.C[i].Flow {
			j++
		}
		runs = append(runs, flowRun{from: i, n: j - i})
		i = j
	}
	slices.SortFunc(runs, func(a, b flowRun) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(c.C[a.from].Flow, c.C[b.from].Flow))
	})
	allocate(runs, cfg)
	for _, r := range runs {
		if r.k > 0 {
			set.Flows = append(set.Flows, makeList(c.C[r.from].Flow, c, c.C[r.from:r.from+r.k]))
		}
	}
	return set
}

// randCands draws an interval's candidates: nFlows flows of Pareto-like
// sizes (a few heavy, many light), flow hashes uniform or, with small,
// all below 2^16 (the radix partition's worst case: one bucket a level),
// and sampling values with repeats (equal S, told apart by send time).
func randCands(rng *rand.Rand, nFlows int, small bool) *SenderCands {
	c := &SenderCands{ID: 1, Limit: limitOf(2), Drop: 30, T: 1e9}
	for f := 0; f < nFlows; f++ {
		h := rng.Uint64()
		if small {
			h = uint64(f) + 1
		}
		n := int(min(1/(rng.Float64()+1e-4), 3000))
		for range n {
			s := rng.Uint64() >> 32
			if rng.IntN(50) == 0 {
				s &^= 0xffff_fff0 // repeats
			}
			c.C = append(c.C, SenderCand{Flow: h, X: s<<32 | uint64(rng.Uint32N(1e9))})
		}
	}
	rng.Shuffle(len(c.C), func(i, j int) { c.C[i], c.C[j] = c.C[j], c.C[i] })
	return c
}

// TestSelectMatchesSort: the grouping (table or radix partition) and per-flow selection ship
// the same lists, sample for sample, as a full sort by flow and value,
// over budgets that leave flows whole, cut or out.
func TestSelectMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i, tc := range []struct {
		flows int
		small bool
		cfg   Config
	}{
		{1, false, DefaultConfig()},
		{30, false, DefaultConfig()},
		{1000, false, DefaultConfig()},
		{1000, true, DefaultConfig()},
		{5000, false, Config{OneIn: 4, PerFlow: 20, MinPerFlow: 5, MaxPerInterval: 3000, LinkOneIn: 64, MaxCandidates: 1 << 21}},
		{300, false, Config{OneIn: 4, PerFlow: 1 << 16, MaxPerInterval: 1 << 22, LinkOneIn: 4, MaxCandidates: 1 << 21}},
		{groupMaxFlows + 100, false, DefaultConfig()}, // the radix partition's case
	} {
		c := randCands(rng, tc.flows, tc.small)
		ref := &SenderCands{}
		*ref = *c
		ref.C = slices.Clone(c.C)
		got, want := Select(c, 0, tc.cfg), selectBySort(ref, 0, tc.cfg)
		if got.Samples() == 0 {
			t.Fatalf("case %d: no samples", i)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d (%d flows, %d candidates): the selection differs from the sorted one", i, tc.flows, len(c.C))
		}
	}
}

// BenchmarkSelect: the sender's per-interval selection (a Selector, its
// memory kept between intervals), at the live
// bench's shape (1024 flows, 125k candidates: 0.5 Mpps at one in 4) and
// at the paper's (150k flows, 1.2M candidates), the default budget.
func BenchmarkSelect(b *testing.B) {
	for _, sh := range []struct {
		name         string
		flows, cands int
	}{{"1024flows-125k", 1024, 125_000}, {"150kflows-1.2M", 150_000, 1_200_000}} {
		b.Run(sh.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			fl := make([]uint64, sh.flows)
			for i := range fl {
				fl[i] = rng.Uint64()
			}
			src := make([]SenderCand, sh.cands)
			for i := range src {
				f := fl[i%sh.flows]
				if i%3 == 0 {
					f = fl[i%min(100, sh.flows)] // heavy flows
				}
				src[i] = SenderCand{Flow: f, X: rng.Uint64()}
			}
			c := &SenderCands{ID: 1, Limit: limitOf(2), Drop: 30, T: 1e9, C: make([]SenderCand, len(src))}
			cfg := DefaultConfig()
			var sel Selector // as the sender's ship goroutine keeps one
			b.ReportAllocs()
			for b.Loop() {
				copy(c.C, src)
				sel.Select(c, 0, cfg)
			}
		})
	}
}

// TestGrouperGroups: the table grouping leaves every flow's candidates
// contiguous and the candidates the same multiset, on one grouper reused
// across intervals of few flows, more flows than its first table, and
// more than groupMaxFlows (the radix partition's case), in any order.
func TestGrouperGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var g grouper
	for i, flows := range []int{1, 3, 1000, 5000, groupMaxFlows + 1, 10, 2 * groupMaxFlows, 2000} {
		cs := make([]SenderCand, 0, 3*flows)
		for f := range flows {
			h := rng.Uint64()
			if f%7 == 0 {
				h = uint64(f) // small hashes collide in the table's bits
			}
			for range 1 + rng.IntN(5) {
				cs = append(cs, SenderCand{Flow: h, X: rng.Uint64()})
			}
		}
		rng.Shuffle(len(cs), func(a, b int) { cs[a], cs[b] = cs[b], cs[a] })
		want := slices.Clone(cs)
		g.group(cs)
		if len(g.slots) > 2*groupMaxFlows { // GroupScratchBytes
			t.Fatalf("case %d (%d flows): a table of %d slots, beyond its bound", i, flows, len(g.slots))
		}
		seen := map[uint64]bool{}
		for j := range cs {
			if j > 0 && cs[j].Flow == cs[j-1].Flow {
				continue
			}
			if seen[cs[j].Flow] {
				t.Fatalf("case %d (%d flows): flow %#x split", i, flows, cs[j].Flow)
			}
			seen[cs[j].Flow] = true
		}
		byAll := func(a, b SenderCand) int { return cmp.Or(cmp.Compare(a.Flow, b.Flow), cmp.Compare(a.X, b.X)) }
		slices.SortFunc(want, byAll)
		slices.SortFunc(cs, byAll)
		if !slices.Equal(cs, want) {
			t.Fatalf("case %d (%d flows): the candidates changed", i, flows)
		}
	}
}
