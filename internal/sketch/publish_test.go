package sketch

import (
	"math"
	"testing"
)

func TestPublishedLoss(t *testing.T) {
	for _, c := range []struct {
		name                string
		point, bound, alone float64
		want                float64
	}{
		{"no loss", 0, 0, 0, 0},
		{"stray packet shared with a loss-free flow", 1, 1, 0, 1 / LossSupportMin},
		{"just below the support, bound high", 1.47, 3, 0, 1.47 / LossSupportMin},
		{"supported", 3.2, 5, 0, 3.2},
		{"at the support", LossSupportMin, 2, 0, LossSupportMin},
		{"point above the bound", 4, 2, 0, 2},
		{"point above a bound below the support", 4, 1.2, 0, 1.2 / LossSupportMin},
		{"proven by a cell of its own", 0.3, 1, 1, 1},
		{"proven, above an unsupported point", 1.2, 2, 2, 2},
		{"alone above the bound (a flow outside the candidates lost there)", 0, 1, 3, 1},
		{"point NaN", math.NaN(), 2, 1, 1},
	} {
		got := PublishedLoss(c.point, c.bound, c.alone)
		if math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: PublishedLoss(%v, %v, %v) = %v, want %v", c.name, c.point, c.bound, c.alone, got, c.want)
		}
		if got >= 1 && c.alone == 0 && !(min(c.point, c.bound) >= LossSupportMin) {
			t.Errorf("%s: an unsupported estimate published as %v >= 1", c.name, got)
		}
	}
}

// TestPublish: PublishDecode publishes decode's estimate with its rules
// (the paper's delay where decode cannot separate a flow, PublishedLoss
// with AloneLoss, the point estimate beside it), and PublishPaper the
// paper's estimate with the count-min bound as the loss. The crowded
// sketch of lossyMultibank leaves flows unidentified, so the fallback is
// exercised.
func TestPublish(t *testing.T) {
	snd, rcv, comp := lossyMultibank(t)
	opt := DecodeOptions{Workers: 2}
	got, err := PublishDecode(snd, rcv, comp, opt)
	if err != nil {
		t.Fatal(err)
	}
	dec, paper, err := EstimateDecodeAndPaper(snd, rcv, comp, opt)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := AloneLoss(snd, rcv, comp)
	if err != nil {
		t.Fatal(err)
	}
	var fellBack, lossy int
	for i, p := range got.Estimates {
		d := dec[i]
		wantFrom, wantDelay, wantCI := EstimatorDecode, d.Delay, d.CI95
		if !d.Identified && !math.IsNaN(paper[i].Delay) {
			wantFrom, wantDelay, wantCI = EstimatorPaper, paper[i].Delay, paper[i].CI95
			fellBack++
		}
		if got.From(i) != wantFrom || !sameBits(p.Delay, wantDelay) || !sameBits(p.CI95, wantCI) ||
			p.Identified != (d.Identified || wantFrom == EstimatorPaper) || !sameBits(p.Stddev, d.Stddev) {
			t.Fatalf("flow %d: published %+v from %s, decode %+v, paper %+v", i, p, got.From(i), d, paper[i])
		}
		if !sameBits(got.Loss(i), PublishedLoss(d.Loss, d.LossBound, alone[i])) || !sameBits(got.LossPoint(i), d.Loss) || p.LossBound != d.LossBound {
			t.Fatalf("flow %d: loss %v (point %v, bound %v), decode %+v, alone %v", i, got.Loss(i), got.LossPoint(i), p.LossBound, d, alone[i])
		}
		if got.Loss(i) > 0 {
			lossy++
		}
	}
	if fellBack == 0 || lossy == 0 {
		t.Fatalf("%d flows fell back on the paper's delay, %d have loss: the rules are not exercised", fellBack, lossy)
	}
	hashes := make([]uint64, len(comp))
	for i := range comp {
		hashes[i] = comp[i].Flow
	}
	pp, err := PublishPaper(snd, rcv, hashes, EstimateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := EstimatePaper(snd, rcv, hashes, EstimateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pp.Estimates {
		if pp.From(i) != EstimatorPaper || !sameBits(p.Delay, want[i].Delay) || pp.Loss(i) != want[i].LossBound || !math.IsNaN(pp.LossPoint(i)) {
			t.Fatalf("paper flow %d: published %+v, estimate %+v", i, p, want[i])
		}
	}
}

func sameBits(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
