package gen

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"

	"github.com/lds-net/lds/internal/jsonl"
	"github.com/lds-net/lds/internal/sample"
)

// TruthRecord is one line of the ground-truth JSONL: the exact figures of one
// flow in one interval. The flow fields carry the same names and meaning as
// the results contract (docs/results.md), so the two join on (interval, src, dst,
// sport, dport, proto). Packets belong to the interval of their send time.
type TruthRecord struct {
	Interval int64  `json:"interval"` // floor(send_ns / T)
	StartNS  int64  `json:"start_ns"` // interval * T
	Src      string `json:"src"`
	Dst      string `json:"dst"`
	SPort    uint16 `json:"sport"` // ICMP: type<<8 | code
	DPort    uint16 `json:"dport"` // ICMP: identifier
	Proto    uint8  `json:"proto"`
	Sent     int64  `json:"sent"`
	Received int64  `json:"received"`
	Lost     int64  `json:"lost"`
	// Mean and population standard deviation of the one-way delay over the
	// received packets; null when none was received.
	DelayNS  *float64 `json:"delay_ns"`
	StddevNS *float64 `json:"stddev_ns"`
	// Delay quantiles over the received packets (linear interpolation
	// between order statistics, the estimator the receiver's samples use);
	// null when none was received.
	P50NS    *float64 `json:"p50_ns"`
	P90NS    *float64 `json:"p90_ns"`
	P99NS    *float64 `json:"p99_ns"`
	Class    string   `json:"class"`        // the scenario class of the flow
	FlowPkts int64    `json:"flow_packets"` // packets of the flow over the whole trace
}

// FlowKey is a flow's 5-tuple (ICMP: type<<8|code and identifier as ports).
type FlowKey struct {
	Src, Dst     netip.Addr
	SPort, DPort uint16
	Proto        uint8
}

// Key returns the record's flow key; an unparsable address is an error.
func (r *TruthRecord) Key() (FlowKey, error) {
	s, err := netip.ParseAddr(r.Src)
	if err != nil {
		return FlowKey{}, fmt.Errorf("truth record: src %q: %w", r.Src, err)
	}
	d, err := netip.ParseAddr(r.Dst)
	if err != nil {
		return FlowKey{}, fmt.Errorf("truth record: dst %q: %w", r.Dst, err)
	}
	return FlowKey{Src: s, Dst: d, SPort: r.SPort, DPort: r.DPort, Proto: r.Proto}, nil
}

// ReadTruth reads a ground-truth JSONL stream (as Generate writes it).
func ReadTruth(r io.Reader) ([]TruthRecord, error) {
	return jsonl.Read(r, "truth", 1<<20, func(t *TruthRecord) error {
		if t.Sent < 0 || t.Received < 0 || t.Received > t.Sent || t.Lost != t.Sent-t.Received {
			return fmt.Errorf("inconsistent counts sent=%d received=%d lost=%d", t.Sent, t.Received, t.Lost)
		}
		return nil
	})
}

// ReadTruthFile reads a ground-truth JSONL file.
func ReadTruthFile(path string) ([]TruthRecord, error) {
	return jsonl.ReadFile(path, "truth file", ReadTruth)
}

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

// record fills a TruthRecord from the accumulator.
func (a *acc) record(rec *TruthRecord) {
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
