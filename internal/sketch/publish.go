package sketch

import "math"

// What the receiver publishes of each flow (docs/decode.md, "Results"):
// one call per estimator, PublishDecode or PublishPaper, returns every
// candidate's estimate with the rules applied that turn that estimator's
// output into a record's delay and loss.

// Published is one flow's estimate as the receiver publishes it.
type Published struct {
	// FlowEstimate is the estimator's, except that under decode a flow the
	// cells cannot separate from its neighbours (not Identified) takes the
	// paper's Delay, CI95 and Identified where the paper has a delay.
	FlowEstimate
	// LossPublished is the record's loss: under decode PublishedLoss of
	// the point estimate, the count-min bound and what the flow's own
	// cells prove (AloneLoss); under paper the count-min bound.
	LossPublished float64
	// LossPoint is decode's point estimate of the lost packets (the
	// record's loss_point); NaN under paper, which has none.
	LossPoint float64
	// From is the estimator whose delay Delay is: EstimatorPaper where
	// decode fell back on the paper's.
	From Estimator
}

// PublishDecode estimates every candidate with EstimateDecodeAndPaper and
// applies decode's publishing rules, in the order of flows. Where the
// cells cannot separate a flow from its neighbours, the decoder's value is
// only its prior (the interval's mean); the paper's least-crowded-cell
// estimate is better there, and is published instead (Stddev, Samples and
// the counts stay decode's). The loss is PublishedLoss.
func PublishDecode(snd, rcv *LDS, flows []FlowComposition, opt DecodeOptions) ([]Published, error) {
	dec, paper, err := EstimateDecodeAndPaper(snd, rcv, flows, opt)
	if err != nil {
		return nil, err
	}
	alone, err := AloneLoss(snd, rcv, flows)
	if err != nil {
		return nil, err
	}
	out := make([]Published, len(dec))
	for i, est := range dec {
		p := &out[i]
		p.FlowEstimate, p.From = est, EstimatorDecode
		p.LossPublished, p.LossPoint = PublishedLoss(est.Loss, est.LossBound, alone[i]), est.Loss
		if !est.Identified && !math.IsNaN(paper[i].Delay) {
			p.Delay, p.CI95, p.Identified = paper[i].Delay, paper[i].CI95, true
			p.From = EstimatorPaper
		}
	}
	return out, nil
}

// PublishPaper estimates every flow with EstimatePaper, in the order of
// flows; the published loss is the count-min bound.
func PublishPaper(snd, rcv *LDS, flows []uint64, opt EstimateOptions) ([]Published, error) {
	ests, err := EstimatePaper(snd, rcv, flows, opt)
	if err != nil {
		return nil, err
	}
	out := make([]Published, len(ests))
	for i, est := range ests {
		out[i] = Published{FlowEstimate: est, LossPublished: est.LossBound, LossPoint: nan, From: EstimatorPaper}
	}
	return out, nil
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
