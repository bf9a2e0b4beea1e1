package sketch

import "math"

// What the receiver publishes of each flow (docs/decode.md, "Results"):
// one call per estimator, PublishDecode or PublishPaper, returns every
// candidate's estimate with the rules applied that turn that estimator's
// output into a record's delay and loss.

// Published is what the receiver publishes of an interval's candidates
// under one estimator, in their order. It adds no per-flow record to the
// estimates: decode's published losses take the place of AloneLoss's
// values, and a byte a flow says whose delay is the paper's.
type Published struct {
	// Estimates are the estimator's, except that under decode a flow the
	// cells cannot separate from its neighbours (not Identified) takes the
	// paper's Delay, CI95 and Identified where the paper has a delay
	// (From says so); Stddev, Samples and the counts stay decode's.
	Estimates []FlowEstimate
	estimator Estimator
	loss      []float64 // decode: the published loss of each flow; nil under paper
	paper     []bool    // decode: the flow's delay is the paper's
}

// Loss is the loss flow i's record publishes: under decode PublishedLoss
// of the point estimate, the count-min bound and what the flow's own
// cells prove (AloneLoss); under paper the count-min bound.
func (p *Published) Loss(i int) float64 {
	if p.loss == nil {
		return p.Estimates[i].LossBound
	}
	return p.loss[i]
}

// LossPoint is decode's point estimate of flow i's lost packets (the
// record's loss_point); NaN under paper, which has none.
func (p *Published) LossPoint(i int) float64 {
	if p.loss == nil {
		return nan
	}
	return p.Estimates[i].Loss
}

// From is the estimator whose delay flow i's Delay is: EstimatorPaper
// where decode fell back on the paper's.
func (p *Published) From(i int) Estimator {
	if p.paper != nil && p.paper[i] {
		return EstimatorPaper
	}
	return p.estimator
}

// PublishDecode estimates every candidate with EstimateDecodeAndPaper and
// applies decode's publishing rules. Where the cells cannot separate a
// flow from its neighbours, the decoder's value is only its prior (the
// interval's mean); the paper's least-crowded-cell estimate is better
// there, and is published instead. The loss is PublishedLoss.
func PublishDecode(snd, rcv *LDS, flows []FlowComposition, opt DecodeOptions) (Published, error) {
	dec, paper, err := EstimateDecodeAndPaper(snd, rcv, flows, opt)
	if err != nil {
		return Published{}, err
	}
	loss, err := AloneLoss(snd, rcv, flows)
	if err != nil {
		return Published{}, err
	}
	fromPaper := make([]bool, len(dec))
	for i := range dec {
		est := &dec[i]
		loss[i] = PublishedLoss(est.Loss, est.LossBound, loss[i])
		if !est.Identified && !math.IsNaN(paper[i].Delay) {
			est.Delay, est.CI95, est.Identified = paper[i].Delay, paper[i].CI95, true
			fromPaper[i] = true
		}
	}
	return Published{Estimates: dec, estimator: EstimatorDecode, loss: loss, paper: fromPaper}, nil
}

// PublishPaper estimates every flow with EstimatePaper; the published
// loss is the count-min bound.
func PublishPaper(snd, rcv *LDS, flows []uint64, opt EstimateOptions) (Published, error) {
	ests, err := EstimatePaper(snd, rcv, flows, opt)
	if err != nil {
		return Published{}, err
	}
	return Published{Estimates: ests, estimator: EstimatorPaper}, nil
}

// LossSupportMin is the point estimate of lost packets from which
// PublishedLoss passes it on unchanged, in packets. Below it the count
// deficits do not tell a flow that lost a packet from one that shares its
// cells with another flow's lost packet: deficit sharing gives a loss-free
// flow of a few hundred packets about one packet when both its p = 1 rows
// hold a deficit cell (docs/RESULTS.md §3), while a flow that really lost
// a few per cent of 100 packets or more comes out at 2 packets and above.
const LossSupportMin = 1.5

// PublishedLoss composes the loss the receiver publishes from decode's
// point estimate, the count-min bound and AloneLoss: the point estimate,
// never above the bound (which is never below the truth while a row is
// unsampled), divided by LossSupportMin where it is below LossSupportMin
// (so that an unsupported estimate stays below one packet); and never
// below what the flow's own cells prove (alone, within the bound).
func PublishedLoss(point, bound, alone float64) float64 {
	v := min(point, bound)
	switch {
	case math.IsNaN(v):
		v = 0
	case v < LossSupportMin:
		v /= LossSupportMin
	}
	return max(v, min(alone, bound))
}
