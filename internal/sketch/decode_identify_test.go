package sketch

import (
	"math"
	"slices"
	"testing"
)

// TestDecodeIdentifyMatchesDefinition checks the fast identification step
// (signature filter, hash grouping, cache-ordered scan) against the
// formula of docs/decode.md evaluated directly for every flow: over f's
// usable cells U, S = V_U + Σ_g s_g·a_g·a_gᵀ with s_g = 1/max(P_g −
// Σ_{c∈U} p_gc, λ_g), Var = 1/(λ_f + a_fᵀ S⁻¹ a_f). Both k = 1 (few
// shared pairs) and k = 5 multi-bank (many: neighbouring windows) under
// loss, so that some cells are left out.
func TestDecodeIdentifyMatchesDefinition(t *testing.T) {
	mb := []float64{0.01, 0.1, 0.5, 1}
	for ci, p := range []Params{{Rows: 4, Columns: 250, VLDA: 1}, {Rows: 4, Columns: 400, VLDA: 5, Sampling: mb}} {
		sndP, rcvP, flows := simulateLossy(uint64(700+ci), 2000, 0.002, 0.01)
		snd, rcv := build(t, p, sndP, rcvP)
		keys := make([]uint64, len(flows))
		for i, f := range flows {
			keys[i] = f.hash
		}
		d, _, err := estimateDecode(snd, rcv, compositions(rcv, keys, rcvP), DecodeOptions{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		inf := func(c int32) bool { return math.IsInf(d.cV[c], 1) }
		// Each entry's flow, from the flow-major index.
		eFlow := make([]int32, len(d.eCell))
		for f := range len(d.fStart) - 1 {
			for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
				eFlow[e] = int32(f)
			}
		}
		// P_g and p_gc by definition.
		q := slices.Clone(d.cV)
		for e, c := range d.eCell {
			q[c] += d.eA[e] * d.eA[e] / d.lam[eFlow[e]]
		}
		pe := make([]float64, len(d.eCell))
		P := slices.Clone(d.lam)
		for e, c := range d.eCell {
			if f := eFlow[e]; !inf(c) {
				a := d.eA[e]
				pe[e] = a * a / max(d.cV[c], q[c]-a*a/d.lam[f])
				P[f] += pe[e]
			}
		}
		var shared, checked, identified, identCoupled, bounded int
		for f := 0; f < d.nA; f++ {
			var U []int32
			var af []float64
			for e := d.fStart[f]; e < d.fStart[f+1]; e++ {
				if c := d.eCell[e]; !inf(c) {
					U = append(U, c)
					af = append(af, d.eA[e])
				}
			}
			L := len(U)
			if L == 0 {
				continue
			}
			S := make([]float64, L*L)
			type share struct {
				li []int
				a  []float64
			}
			others := map[int32]*share{}
			excl := map[int32]float64{}
			for li, c := range U {
				S[li*L+li] = d.cV[c]
				for j := d.cStart[c]; j < d.cStart[c+1]; j++ {
					e := d.cE[j].e
					g := eFlow[e]
					if int(g) == f {
						continue
					}
					if others[g] == nil {
						others[g] = &share{}
					}
					others[g].li = append(others[g].li, li)
					others[g].a = append(others[g].a, d.eA[e])
					excl[g] += pe[e]
				}
			}
			coupled := false
			for g, sh := range others {
				if len(sh.li) > 1 {
					shared++
					coupled = true
				}
				s := 1 / max(P[g]-excl[g], d.lam[g])
				for i := range sh.li {
					for j := range sh.li {
						S[sh.li[i]*L+sh.li[j]] += sh.a[i] * sh.a[j] * s
					}
				}
			}
			if d.aloneOK[f] {
				continue // exact by alone: identify does not compute its posterior
			}
			want := 1 / (d.lam[f] + quadInv(S, af, L))
			checked++
			// A flow that cannot be identified may keep a lower bound on
			// its posterior variance (identify's bound): never used.
			thr := identifiedFraction * d.priorVar(f)
			switch {
			case want <= thr:
				identified++
				if coupled {
					identCoupled++
				}
				if math.Abs(d.post[f]-want) > 1e-9*want {
					t.Errorf("k=%d flow %d (%d cells): posterior variance %g, definition %g", p.VLDA, f, L, d.post[f], want)
				}
			case d.post[f] <= thr || d.post[f] > want*(1+1e-9):
				t.Errorf("k=%d flow %d (%d cells): posterior variance %g, definition %g above the threshold %g: want a value in (threshold, definition]", p.VLDA, f, L, d.post[f], want, thr)
			case math.Abs(d.post[f]-want) > 1e-9*want:
				bounded++
			}
		}
		t.Logf("k=%d: %d flows checked (%d identified, %d of them coupled to a neighbour sharing several cells; %d kept the bound), %d flow pairs sharing several cells", p.VLDA, checked, identified, identCoupled, bounded, shared)
		if checked < 500 || identCoupled < 5 || bounded == 0 {
			t.Fatalf("k=%d: %d flows, %d identified with coupling, %d bounded: the case does not exercise the exact coupling and the bound", p.VLDA, checked, identCoupled, bounded)
		}
	}
}
