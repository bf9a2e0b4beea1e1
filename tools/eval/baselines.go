package eval

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/lds-net/lds/internal/heapq"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/truth"
)

// ExactLabel names the run built by joining every packet (zero error by
// definition: it is the truth, recomputed from the per-packet stream).
const ExactLabel = "exact-join"

// DefaultRLIRateHz is the reference rate the LDS paper gives RLI (§5.1).
const DefaultRLIRateHz = 1000

// Bytes a per-packet export ships (see ExportBytes): per sender-tap packet
// an 8-byte packet hash and the send time as an offset within the interval
// (ns, in the fewest whole bytes that hold T: 4 for T = 1 s, 5 for 300 s);
// per (interval, flow) a header with the flow key and a 4-byte packet count.
const (
	ExportHashBytes  = 8
	ExportCountBytes = 4
	ExportKeyBytesV4 = 4 + 4 + 2 + 2 + 1   // addresses, ports, protocol
	ExportKeyBytesV6 = 16 + 16 + 2 + 2 + 1 //
)

// ExportTimeBytes is the bytes of a send-time offset within an interval of
// t ns (at least 1).
func ExportTimeBytes(t int64) int {
	n := 1
	for v := uint64(max(t-1, 0)) >> 8; v > 0; v >>= 8 {
		n++
	}
	return n
}

// RLILabel is the run label of RLI at rate hz: "rli-1khz" for 1000.
func RLILabel(hz float64) string {
	if hz >= 1000 && math.Mod(hz, 1000) == 0 {
		return "rli-" + strconv.FormatFloat(hz/1000, 'f', -1, 64) + "khz"
	}
	return "rli-" + strconv.FormatFloat(hz, 'f', -1, 64) + "hz"
}

// RLIStats describes one RLI emulation.
type RLIStats struct {
	RateHz float64 // configured reference rate
	TickNS int64   // 1e9 / RateHz: one reference candidate per tick
	// Packets: sender-tap packets; Received: of those, received.
	Packets, Received uint64
	// Ticks with at least one packet sent; of those, References had their
	// first packet received (usable) and LostReferences lost it (no
	// reference for that tick, as a lost probe).
	Ticks, References, LostReferences uint64
	// Regular received packets: Interpolated between two references,
	// Extrapolated (flat) before the first or after the last reference,
	// Unestimated when the trace has no reference at all.
	Interpolated, Extrapolated, Unestimated uint64
	// OutOfOrder: packets whose send time is below an earlier one's (the
	// input is meant to be in send order); they are still used.
	OutOfOrder uint64
	// MaxBuffered: most regular packets held between two references.
	MaxBuffered             int
	FirstSendNS, LastSendNS int64
}

// AchievedHz is the usable references per second of trace.
func (s RLIStats) AchievedHz() float64 {
	d := float64(s.LastSendNS-s.FirstSendNS) / 1e9
	if s.Packets == 0 || d <= 0 {
		return math.NaN()
	}
	return float64(s.References) / d
}

// ShippedBytes is what the passive emulation moves between the taps over
// intervals of t ns: the sender names each reference (packet hash + send
// time offset, as in the per-packet export).
func (s RLIStats) ShippedBytes(t int64) float64 {
	return float64(s.References) * float64(ExportHashBytes+ExportTimeBytes(t))
}

type accKey struct {
	iv int64
	k  capture.FlowKey
}

// flowAcc is the per-(interval, flow) state: packets sent and lost, and
// the count, mean and M2 (Welford) of the delays attributed to the flow.
type flowAcc struct {
	key        accKey
	sent, lost int64
	n          int64
	mean, m2   float64
}

func (a *flowAcc) add(d float64) {
	a.n++
	delta := d - a.mean
	a.mean += delta / float64(a.n)
	a.m2 += delta * (d - a.mean)
}

// accs holds flowAccs in first-seen order (the order of the output).
type accs struct {
	idx map[accKey]int32
	a   []flowAcc
}

func (s *accs) slot(iv int64, k *capture.FlowKey) int32 {
	key := accKey{iv, *k}
	if i, ok := s.idx[key]; ok {
		return i
	}
	if s.idx == nil {
		s.idx = map[accKey]int32{}
	}
	i := int32(len(s.a))
	s.idx[key] = i
	s.a = append(s.a, flowAcc{key: key})
	return i
}

func (s *accs) records(t int64, label string, withLoss bool) []results.FlowRecord {
	out := make([]results.FlowRecord, 0, len(s.a))
	for i := range s.a {
		a := &s.a[i]
		k := a.key.k
		r := results.FlowRecord{Interval: a.key.iv, StartNS: a.key.iv * t, Key: k, Samples: float64(a.n), Estimator: label}
		if withLoss {
			r.Packets, r.Loss = float64(a.sent), results.Float(float64(a.lost))
		} else {
			r.Packets = float64(a.sent - a.lost) // what a receiver-side method counts
			r.Loss = results.Float(0)            // it sees no loss (a DelayOnly label in reports)
		}
		if a.n > 0 {
			r.DelayNS = results.Float(a.mean)
			r.StddevNS = results.Float(math.Sqrt(math.Max(0, a.m2/float64(a.n))))
		}
		out = append(out, r)
	}
	return out
}

// exact aggregates the true delays per (interval, flow).
type exact struct {
	t int64
	accs
}

func (e *exact) add(p *PacketDelay) {
	a := &e.a[e.slot(interval.ID(p.SendNS, e.t), &p.Key)]
	a.sent++
	if p.Lost {
		a.lost++
		return
	}
	a.add(float64(p.Delay()))
}

// pendPkt is a received packet waiting to be handled in receive order.
type pendPkt struct {
	recv, send int64
	slot       int32
	ref        bool
}

// regPkt is a regular packet waiting for the next reference.
type regPkt struct {
	recv int64
	slot int32
}

// rli emulates Reference Latency Interpolation passively (see RLIBaseline).
type rli struct {
	t, tick  int64
	lastTick int64
	maxSend  int64
	started  bool
	accs
	heap    []pendPkt // min-heap by receive time
	buf     []regPkt  // regular packets received since the last reference
	refT    int64     // last reference: receive time and delay
	refD    float64
	haveRef bool
	st      RLIStats
}

func newRLI(rateHz float64, t int64) (*rli, error) {
	if !(rateHz > 0) || math.IsInf(rateHz, 0) {
		return nil, fmt.Errorf("rli: reference rate %v Hz: want a positive rate (the paper uses %d)", rateHz, DefaultRLIRateHz)
	}
	tick := int64(math.Round(1e9 / rateHz))
	if tick < 1 {
		return nil, fmt.Errorf("rli: reference rate %v Hz is above 1 GHz", rateHz)
	}
	if t <= 0 {
		return nil, fmt.Errorf("rli: interval length %d ns: want > 0", t)
	}
	return &rli{t: t, tick: tick, st: RLIStats{RateHz: rateHz, TickNS: tick}}, nil
}

func (r *rli) add(p *PacketDelay) {
	r.st.Packets++
	first := false
	if !r.started {
		r.started = true
		r.maxSend, r.lastTick = p.SendNS, interval.ID(p.SendNS, r.tick)
		r.st.FirstSendNS = p.SendNS
		first = true
	} else if p.SendNS < r.maxSend {
		r.st.OutOfOrder++
	} else {
		r.maxSend = p.SendNS
		if tk := interval.ID(p.SendNS, r.tick); tk > r.lastTick {
			r.lastTick, first = tk, true
		}
	}
	r.st.LastSendNS = r.maxSend
	if first {
		r.st.Ticks++
	}
	if p.Lost {
		if first {
			r.st.LostReferences++
		}
		return
	}
	r.st.Received++
	if first {
		r.st.References++
	}
	// Every later packet is received after its send time >= maxSend, so a
	// waiting packet received by maxSend can be handled now, in receive order.
	for len(r.heap) > 0 && r.heap[0].recv <= r.maxSend {
		r.handle(r.pop())
	}
	slot := r.slot(interval.ID(p.SendNS, r.t), &p.Key)
	r.a[slot].sent++ // the receiver counts only what it receives
	r.push(pendPkt{recv: p.RecvNS, send: p.SendNS, slot: slot, ref: first})
}

// handle takes received packets in receive order: regular ones wait for the
// next reference; a reference settles them by linear interpolation in
// receive time between the previous reference's delay and its own.
func (r *rli) handle(q pendPkt) {
	if !q.ref {
		r.buf = append(r.buf, regPkt{q.recv, q.slot})
		r.st.MaxBuffered = max(r.st.MaxBuffered, len(r.buf))
		return
	}
	d := float64(q.recv - q.send)
	for _, b := range r.buf {
		if r.haveRef {
			r.a[b.slot].add(interpolate(r.refT, r.refD, q.recv, d, b.recv))
			r.st.Interpolated++
		} else {
			r.a[b.slot].add(d) // before the first reference: its delay, flat
			r.st.Extrapolated++
		}
	}
	r.buf = r.buf[:0]
	r.a[q.slot].add(d) // a reference's own delay is known exactly
	r.refT, r.refD, r.haveRef = q.recv, d, true
}

// interpolate the delay at time t between (t1, d1) and (t2, d2); t outside
// [t1, t2] (only with receive times out of order) is clamped.
func interpolate(t1 int64, d1 float64, t2 int64, d2 float64, t int64) float64 {
	if t2 <= t1 {
		return d2
	}
	f := float64(t-t1) / float64(t2-t1)
	f = min(1, max(0, f))
	return d1 + f*(d2-d1)
}

func (r *rli) finish() {
	for len(r.heap) > 0 {
		r.handle(r.pop())
	}
	for _, b := range r.buf {
		if r.haveRef {
			r.a[b.slot].add(r.refD) // after the last reference: its delay, flat
			r.st.Extrapolated++
		} else {
			r.st.Unestimated++
		}
	}
	r.buf = r.buf[:0]
}

func (r *rli) push(q pendPkt) { r.heap = heapq.Push(r.heap, q, pendLess) }

func (r *rli) pop() (q pendPkt) {
	r.heap, q = heapq.Pop(r.heap, pendLess)
	return q
}

// receive time, then send time: a deterministic order for ties.
func pendLess(a, b *pendPkt) bool {
	if a.recv != b.recv {
		return a.recv < b.recv
	}
	return a.send < b.send
}

// RLIBaseline emulates Reference Latency Interpolation (Lee, Duffield,
// Kompella, SIGCOMM 2010; the LDS paper's competitor in §5.1) passively on
// per-packet truth in send order:
//
//   - References: time is cut into ticks of 1/refRateHz; the first packet
//     SENT in each tick is that tick's reference, as if the sender had
//     stamped it (RLI injects a probe per tick). If it is lost, the tick
//     has no reference. The reference's delay is its exact delay.
//   - At the receiver, in RECEIVE order (RLI's receiver sees only arrival
//     times of regular packets), every regular packet between two
//     references gets the delay linearly interpolated in receive time
//     between the two references' delays; before the first and after the
//     last reference, the nearest reference's delay.
//   - Per (interval of the send time, flow): mean and standard deviation of
//     the estimated delays (RLI's per-flow counters). RLI estimates no loss:
//     records carry Loss 0 and Packets = packets received; evaluate it as a
//     delay-only run (Options.DelayOnly).
//
// Memory: per-(interval, flow) accumulators, packets in flight (received
// after the newest send time: about rate x delay) and the regular packets
// between two references. T is the interval length in ns.
func RLIBaseline(pkts Packets, refRateHz float64, t int64) ([]results.FlowRecord, RLIStats, error) {
	r, err := newRLI(refRateHz, t)
	if err != nil {
		return nil, RLIStats{}, err
	}
	if err := pkts(func(p *PacketDelay) bool { r.add(p); return true }); err != nil {
		return nil, r.st, fmt.Errorf("rli: %w", err)
	}
	r.finish()
	return r.records(t, RLILabel(refRateHz), false), r.st, nil
}

// ExactJoin aggregates per-packet truth per (interval, flow): exact mean
// and standard deviation of the delay, packets sent, exact loss. As a run
// its error is zero by definition; it is there to show the cost of being
// exact and to check a per-packet source against a truth file.
func ExactJoin(pkts Packets, t int64) ([]results.FlowRecord, error) {
	if t <= 0 {
		return nil, fmt.Errorf("exact join: interval length %d ns: want > 0", t)
	}
	e := &exact{t: t}
	if err := pkts(func(p *PacketDelay) bool { e.add(p); return true }); err != nil {
		return nil, fmt.Errorf("exact join: %w", err)
	}
	return e.records(t, ExactLabel, true), nil
}

// BaselineConfig selects the per-packet baselines RunBaselines computes in
// one pass.
type BaselineConfig struct {
	T         int64   // interval length, ns (docs/DESIGN.md, "2. Packet → interval")
	RLI       bool    // Reference Latency Interpolation
	RLIRateHz float64 // references per second; 0 = DefaultRLIRateHz
	Exact     bool    // the exact per-packet join as a run
}

// Validate says what is wrong with the configuration.
func (c BaselineConfig) Validate() error {
	if c.T <= 0 {
		return fmt.Errorf("baselines: interval length %d ns: want > 0", c.T)
	}
	if c.RLIRateHz < 0 || math.IsNaN(c.RLIRateHz) || math.IsInf(c.RLIRateHz, 0) {
		return fmt.Errorf("baselines: RLI rate %v Hz: want > 0 (0 = %d)", c.RLIRateHz, DefaultRLIRateHz)
	}
	if !c.RLI && !c.Exact {
		return fmt.Errorf("baselines: none selected: enable RLI and/or Exact")
	}
	return nil
}

// ParseBaselineList sets RLI and Exact from a comma-separated list of
// "rli" and "exact" (the CLI's --baselines); "" selects none.
func (c *BaselineConfig) ParseBaselineList(list string) error {
	c.RLI, c.Exact = false, false
	for _, f := range strings.Split(list, ",") {
		switch strings.TrimSpace(f) {
		case "":
		case "rli":
			c.RLI = true
		case "exact":
			c.Exact = true
		default:
			return fmt.Errorf("baselines: unknown %q in %q: use rli and/or exact (global-average is always on)", f, list)
		}
	}
	return nil
}

// Baselines are the runs of RunBaselines and what Evaluate needs to show them.
type Baselines struct {
	Runs map[string][]results.FlowRecord
	// RLI is set when RLI ran.
	RLI *RLIStats
	// DelayOnly: labels without a loss estimate (RLI).
	DelayOnly []string
	// ShippedBytes: bytes each run moved between the taps over the trace.
	ShippedBytes map[string]float64
}

// RunBaselines computes the selected baselines in one pass over pkts.
func RunBaselines(pkts Packets, cfg BaselineConfig) (Baselines, error) {
	if err := cfg.Validate(); err != nil {
		return Baselines{}, err
	}
	rate := cfg.RLIRateHz
	if rate == 0 {
		rate = DefaultRLIRateHz
	}
	var r *rli
	var e *exact
	if cfg.RLI {
		var err error
		if r, err = newRLI(rate, cfg.T); err != nil {
			return Baselines{}, err
		}
	}
	if cfg.Exact {
		e = &exact{t: cfg.T}
	}
	err := pkts(func(p *PacketDelay) bool {
		if r != nil {
			r.add(p)
		}
		if e != nil {
			e.add(p)
		}
		return true
	})
	if err != nil {
		return Baselines{}, fmt.Errorf("baselines: %w", err)
	}
	b := Baselines{Runs: map[string][]results.FlowRecord{}, ShippedBytes: map[string]float64{}}
	if r != nil {
		r.finish()
		l := RLILabel(rate)
		b.Runs[l] = r.records(cfg.T, l, false)
		st := r.st
		b.RLI = &st
		b.DelayOnly = append(b.DelayOnly, l)
		b.ShippedBytes[l] = st.ShippedBytes(cfg.T)
	}
	if e != nil {
		b.Runs[ExactLabel] = e.records(cfg.T, ExactLabel, true)
	}
	return b, nil
}

// Apply adds the baseline runs to runs (an existing label is an error) and
// their report settings to opt.
func (b Baselines) Apply(runs map[string][]results.FlowRecord, opt *Options) error {
	for l, recs := range b.Runs {
		if _, ok := runs[l]; ok {
			return fmt.Errorf("baselines: a run is already labelled %q: rename it", l)
		}
		runs[l] = recs
	}
	opt.DelayOnly = append(opt.DelayOnly, b.DelayOnly...)
	if len(b.ShippedBytes) > 0 && opt.ShippedBytes == nil {
		opt.ShippedBytes = map[string]float64{}
	}
	for l, v := range b.ShippedBytes {
		opt.ShippedBytes[l] = v
	}
	if b.RLI != nil {
		opt.RLI = b.RLI
	}
	return nil
}

// ExportBytes is what an exact per-packet join ships for one (interval,
// flow) truth record with intervals of t ns: the flow's key and packet
// count, and per packet sent its hash and send-time offset (see the
// Export* constants). It is a floor: no framing, no compression.
func ExportBytes(r *truth.Record, v6 bool, t int64) float64 {
	kb := ExportKeyBytesV4
	if v6 {
		kb = ExportKeyBytesV6
	}
	return float64(kb+ExportCountBytes) + float64(ExportHashBytes+ExportTimeBytes(t))*float64(r.Sent)
}
