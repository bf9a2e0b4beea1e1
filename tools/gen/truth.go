package gen

import (
	"math"
	"slices"

	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/tools/truth"
)

// acc accumulates one flow's delays within the current interval (Welford:
// delays of tens of ms with sub-µs spread would cancel in a sum of squares).
type acc struct {
	sent, recv int64
	mean, m2   float64
	delays     []float64 // every received packet's delay, for the quantiles
}

// reset empties a for the next interval, keeping its buffer.
func (a *acc) reset() { *a = acc{delays: a.delays[:0]} }

func (a *acc) add(d float64) {
	a.delays = append(a.delays, d)
	a.recv++
	delta := d - a.mean
	a.mean += delta / float64(a.recv)
	a.m2 += delta * (d - a.mean)
}

// record fills a truth record from the accumulator.
func (a *acc) record(rec *truth.Record) {
	rec.Sent, rec.Received, rec.Lost = a.sent, a.recv, a.sent-a.recv
	rec.DelayNS, rec.StddevNS = nil, nil
	rec.P50NS, rec.P90NS, rec.P99NS = nil, nil, nil
	if a.recv > 0 {
		m := a.mean
		s := math.Sqrt(max(a.m2, 0) / float64(a.recv))
		rec.DelayNS, rec.StddevNS = &m, &s
		slices.Sort(a.delays)
		p50, p90, p99 := sample.Quantile(a.delays, 0.5), sample.Quantile(a.delays, 0.9), sample.Quantile(a.delays, 0.99)
		rec.P50NS, rec.P90NS, rec.P99NS = &p50, &p90, &p99
	}
}
