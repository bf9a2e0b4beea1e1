package receiver

import (
	"math"
	"slices"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sketch"
)

// Estimation turns a matched interval into published records.
type Estimation struct {
	Estimator sketch.Estimator
	Alpha     float64
	T         int64
	Classes   []string // LDA class names, index 0 = default
	FlowHash  func(capture.FlowKey) uint64
	Weight    func(capture.FlowKey) uint32
	// Workers bounds the goroutines of decode's per-flow stages (results
	// do not depend on it): the receiver gives it the cores its capture
	// workers leave, so that an estimation burst does not take CPU from
	// the capture rings.
	Workers int
	// Consistent packet samples: the delay window of the join, and the
	// receiver's candidates of the interval's sender entry (nil: no join).
	Window sample.Window
	Pieces *sample.Pieces
	// MaxFlows caps the candidates (sketch.max_flows): the sender's heavy
	// keys join the receiver's flows only while fewer are listed, and at
	// most Heavy of them (sketch.heavy), whatever the sender sent.
	MaxFlows, Heavy int
	// NoRepair leaves every lossy cell as it is (repair.go).
	NoRepair bool
}

// Clock is both ends' clock verdict for an interval.
type Clock struct {
	Unsynced bool
	ErrorNS  *float64
}

// Estimate computes per-flow and link records of a matched interval.
func (e *Estimation) Estimate(sender string, mt *interval.Matched, clk Clock) (*results.Interval, error) {
	iv := &results.Interval{Sender: sender, Interval: mt.ID, StartNS: mt.ID * e.T, Outcome: mt.Outcome,
		SenderDrops: mt.Meta.KernelDrops + mt.Meta.IfDrops, ReceiverDrops: mt.ReceiverDrops, SketchBytes: mt.Meta.SketchBytes}
	var joined *sample.Joined
	if e.Pieces != nil {
		var set *sample.Set
		if mt.Sender != nil {
			set = mt.Sender.Samples
		}
		joined = sample.Join(e.Pieces, mt.ID, set, e.Window) // also frees the pieces of intervals without one
	}
	if mt.Sender == nil || mt.Receiver == nil {
		return iv, nil
	}
	if clk.Unsynced && iv.Outcome == results.OutcomeMatched {
		iv.Outcome = results.OutcomeUnsynced
	}
	// Candidates: every flow the receiver saw, plus the sender's heaviest
	// keys (a flow that lost every packet is only known from those).
	heavy := mt.Sender.Heavy
	if e.MaxFlows > 0 {
		heavy = heavy[:min(len(heavy), e.Heavy, max(0, e.MaxFlows-mt.Flows.Len()))]
	}
	keys := make([]capture.FlowKey, 0, mt.Flows.Len()+len(heavy))
	hashes := make([]uint64, 0, cap(keys))
	weights := map[uint64]float64{}
	for i := range mt.Flows.Flows {
		f := &mt.Flows.Flows[i]
		keys = append(keys, f.Key)
		hashes = append(hashes, f.FlowHash)
	}
	for _, k := range heavy {
		if h := e.FlowHash(k); mt.Flows.Lookup(k, h) == nil {
			keys = append(keys, k)
			hashes = append(hashes, h)
		}
	}
	if e.Weight != nil {
		for i, k := range keys {
			if w := e.Weight(k); w != 1 {
				weights[hashes[i]] = float64(w)
			}
		}
	}
	weight := func(f uint64) float64 {
		if w, ok := weights[f]; ok {
			return w
		}
		return 1
	}
	opt := sketch.EstimateOptions{Alpha: e.Alpha, Weight: weight}
	// The list of lost packets comes first: its exact send times repair
	// the lossy cells the estimators then read (repair.go).
	perFlow := buildLost(iv, mt, sender) // lost.go
	cr := e.repairCells(iv, mt, sender)
	var pub sketch.Published
	var err error
	if e.Estimator == sketch.EstimatorDecode {
		// The receiver knows exactly how many packets of each flow it put
		// in each of its cells; flows known only from the sender's heavy
		// keys sit in no receiver cell.
		p := mt.Receiver.LDS.Params()
		comp := make([]sketch.FlowComposition, len(hashes))
		empty := make([]uint32, p.Rows*p.VLDA)
		for i, h := range hashes {
			comp[i] = sketch.FlowComposition{Flow: h, Cells: empty, Weight: weight(h)}
			if i < mt.Flows.Len() {
				comp[i].Cells = mt.Flows.Flows[i].Cells
			}
		}
		pub, err = sketch.PublishDecode(cr.snd, cr.rcv, comp, sketch.DecodeOptions{Paper: opt, Workers: max(1, e.Workers)})
	} else {
		pub, err = sketch.PublishPaper(cr.snd, cr.rcv, hashes, opt)
	}
	if err != nil {
		return nil, err
	}
	iv.UsableCellRatio = sketch.UsableCellRatio(mt.Sender.Sk.LDS, mt.Receiver.LDS)
	iv.Flows = make([]results.FlowRecord, len(pub.Estimates))
	iv.Touched = make([]bool, len(pub.Estimates))
	cellsPerFlow := mt.Receiver.LDS.Params().Rows * mt.Receiver.LDS.Params().VLDA
	for i, est := range pub.Estimates {
		iv.Touched[i] = est.Usable < cellsPerFlow
		k := keys[i]
		r := &iv.Flows[i]
		*r = results.FlowRecord{Interval: mt.ID, StartNS: iv.StartNS, Key: k, Loss: results.Float(pub.Loss(i)), Packets: est.Packets, Samples: est.Samples,
			Sender: sender, Estimator: string(e.Estimator), Partial: mt.Partial, Unsynced: clk.Unsynced, ErrorNS: clk.ErrorNS}
		// The bound and decode's point estimate keep their own fields
		// beside the published loss (docs/decode.md, "Loss and packets").
		r.LossBound, r.LossPoint = results.Float(est.LossBound), results.Float(pub.LossPoint(i))
		if !math.IsNaN(est.Bytes) {
			r.Bytes = results.Float(est.Bytes)
		}
		if clk.Unsynced {
			r.Status = results.StatusClockUnsynced
			continue // delays from unsynchronized clocks are withheld, counts still publish
		}
		r.Estimator = string(pub.From(i)) // decode's record takes the paper's delay where decode cannot separate the flow
		switch {
		case math.IsNaN(est.Delay):
			r.Status = results.StatusNoUsableCell
		case !est.Identified:
			r.Status = results.StatusNotIdentified
		default:
			r.DelayNS, r.StddevNS, r.CI95NS = results.Float(est.Delay), results.Float(est.Stddev), results.Float(est.CI95)
			r.DelayFrom = results.DelayFromSketch
			if r.StddevNS != nil {
				r.StddevFrom = "sketch"
			}
		}
	}
	if joined != nil {
		for i := range iv.Flows {
			if d := joined.Flows[hashes[i]]; d != nil {
				applySamples(&iv.Flows[i], d)
			}
		}
	}
	cr.markRepaired(iv, hashes)
	e.linkRecords(iv, mt, sender, clk, joined, cr)
	applyLostFlows(iv, mt, perFlow, e.FlowHash) // lost.go
	applyReorder(iv, joined, hashes)            // reorder.go
	return iv, nil
}

// linkRecords appends the interval's link (LDA) record of every traffic
// class both ends' sketches have.
func (e *Estimation) linkRecords(iv *results.Interval, mt *interval.Matched, sender string, clk Clock, joined *sample.Joined, cr *cellRepair) {
	for c, name := range e.Classes {
		if c >= len(mt.Sender.Sk.LDA) || c >= len(mt.Receiver.LDA) {
			break
		}
		le := sketch.EstimateLDA(mt.Sender.Sk.LDA[c], mt.Receiver.LDA[c])
		repaired := cr.linkDelay(c, &le)
		lr := results.LinkRecord{Interval: mt.ID, StartNS: iv.StartNS, Sender: sender, Class: name,
			Sent: le.Sent, Received: le.Received, LossRatio: results.Float(zeroNaN(le.LossRatio)), Samples: le.Samples,
			Partial: mt.Partial, Unsynced: clk.Unsynced, ErrorNS: clk.ErrorNS, RepairedCells: repaired}
		if !clk.Unsynced {
			lr.DelayNS, lr.StddevNS, lr.CI95NS = results.Float(le.Delay), results.Float(le.Stddev), results.Float(le.CI95)
			if lr.DelayNS != nil {
				lr.DelayFrom = results.DelayFromSketch
			}
			if joined != nil {
				linkSamples(&lr, uint16(c), joined.Link)
			}
		}
		iv.Links = append(iv.Links, lr)
	}
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// applySamples puts a flow's joined samples into its record: the lost
// samples raise loss, loss_point and loss_bound to at least their count
// (a sampled packet the receiver never saw is lost), and, where the clocks allow delays, the
// quantiles and the stddev come from the samples where there are enough
// of them (docs/sampling.md).
func applySamples(r *results.FlowRecord, d *sample.FlowDist) {
	if d.Lost > 0 {
		r.SampledLost = d.Lost
		r.Loss = atLeast(r.Loss, d.Lost)
		r.LossPoint, r.LossBound = atLeast(r.LossPoint, d.Lost), atLeast(r.LossBound, d.Lost)
	}
	if r.Unsynced {
		return
	}
	sm := d.Summarize()
	r.DelaySamples = sm.N
	r.P50NS, r.P90NS, r.P99NS = results.Float(sm.P50), results.Float(sm.P90), results.Float(sm.P99)
	r.P99LowNS = results.Float(sm.P99Low)
	if !math.IsNaN(sm.Stddev) {
		r.StddevNS, r.StddevFrom = results.Float(sm.Stddev), "samples"
	}
	combineDelay(r, d.MeanDelay())
}

// combineDelay gives r the mean delay of its joined samples where the
// sketch has none (all its cells lossy, or the decoder could not tell it
// from its neighbours), and weighs the two where both have one (weigh).
// A record whose delay is withheld for another reason (clock, window)
// keeps its status.
func combineDelay(r *results.FlowRecord, m sample.Mean) {
	if math.IsNaN(m.Mean) {
		return
	}
	if r.DelayNS == nil && r.Status != results.StatusNoUsableCell && r.Status != results.StatusNotIdentified && r.Status != results.StatusMeasured {
		return
	}
	r.DelayNS, r.CI95NS, r.DelayFrom = weigh(r.DelayNS, r.CI95NS, r.Samples, r.DelayFrom, m)
	switch r.DelayFrom {
	case results.DelayFromSamples:
		r.Samples, r.Status = float64(m.N), results.StatusMeasured
	case results.DelayFromBoth:
		r.Samples += float64(m.N)
	}
}

// weigh combines a sketch's mean delay (delay, ci95; nil where none; n
// the packets it rests on) with the mean of joined samples m
// (docs/sampling.md, "Delay under loss"): m alone where the sketch has no
// mean; the two weighed by the inverse of their variances, (ci95/1.96)²
// each, where the sketch's mean rests on fewer packets than the samples
// (the samples' ci95 carries its Student t factor, so that a mean of few
// samples, whose spread is itself unsure, weighs less); else the
// sketch's alone. A sketch mean over more packets than the samples covers
// the samples' own packets (they are a subset of the interval's), and
// its ci95, which treats the packets as draws of a wider population,
// overstates its error against the interval's mean: weighing by it made
// the error worse, never better, in every trace measured (docs/sampling.md).
// It returns the delay, its ci95 and where it came from.
func weigh(delay, ci *float64, n float64, from string, m sample.Mean) (d, c *float64, src string) {
	if math.IsNaN(m.Mean) {
		return delay, ci, from
	}
	if delay == nil {
		return results.Float(m.Mean), results.Float(m.CI95), results.DelayFromSamples
	}
	if ci == nil || *ci == 0 || n >= float64(m.N) {
		return delay, ci, from
	}
	vs, vm := *ci/z95, m.CI95/z95
	ws, wm := 1/(vs*vs), 1/math.Max(vm*vm, 1) // identical delays: 1 ns² keeps the weight finite
	return results.Float((ws**delay + wm*m.Mean) / (ws + wm)), results.Float(z95 / math.Sqrt(ws+wm)), results.DelayFromBoth
}

// z95 is the normal 0.975 quantile.
const z95 = 1.959963984540054

// atLeast is v raised to n (nil stays nil).
func atLeast(v *float64, n int) *float64 {
	if v != nil && *v < float64(n) {
		return results.Float(float64(n))
	}
	return v
}

// linkSamples gives a class its per-packet quantiles and histogram delays
// from the uniform link sample.
func linkSamples(lr *results.LinkRecord, class uint16, link []sample.LinkSample) {
	for _, x := range link {
		if x.Class == class {
			lr.Delays = append(lr.Delays, x.Delay)
		}
	}
	slices.Sort(lr.Delays)
	d := sample.FlowDist{Delays: lr.Delays}
	sm := d.Summarize()
	lr.DelaySamples = sm.N
	lr.P50NS, lr.P90NS, lr.P99NS = results.Float(sm.P50), results.Float(sm.P90), results.Float(sm.P99)
	// The LDA's banks can all be lossy; the uniform sample's delays are
	// exact whatever was lost.
	lr.DelayNS, lr.CI95NS, lr.DelayFrom = weigh(lr.DelayNS, lr.CI95NS, lr.Samples, lr.DelayFrom, d.MeanDelay())
}
