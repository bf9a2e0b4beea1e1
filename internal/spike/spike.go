// Package spike flags per-flow latency and loss spikes: a flow's mean
// delay, 99th-percentile delay and loss ratio in one interval, each
// compared with that flow's own baseline of it over past intervals.
//
// The rule is deliberately conservative so that small, noisy flows never page
// anyone. A record spikes when the lower end of its 95 % confidence interval
// still lies above the baseline by a margin:
//
//	delay − ci95 > baseline + max(k·dev, min_abs, rel·baseline)
//
// baseline is an EWMA of the flow's mean delay, dev an EWMA of its absolute
// deviation from the baseline (the RTTVAR idea of TCP), and no record alarms
// before the flow has warmup intervals of history. The p99 (where joined
// samples give one) follows the same rule with its lower confidence bound
// (p99_low_ns) for delay − ci95; the loss ratio with the Wilson lower
// bound of the ratio and its own smallest margins (loss_min_abs, loss_rel).
// Memory is bounded: at most max_flows baselines are kept, the least
// recently seen evicted first.
package spike

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

// Config is the `spike:` section of the receiver configuration.
type Config struct {
	Enabled  bool          `yaml:"enabled"`
	Alpha    float64       `yaml:"alpha"`     // EWMA weight of the newest interval, (0, 1]
	Warmup   int           `yaml:"warmup"`    // intervals of history before a flow may alarm
	K        float64       `yaml:"k"`         // margin in units of the baseline's deviation
	MinAbs   time.Duration `yaml:"min_abs"`   // smallest margin, whatever the deviation
	Rel      float64       `yaml:"rel"`       // smallest margin relative to the baseline
	MaxFlows int           `yaml:"max_flows"` // baselines kept; least recently seen evicted
	// Loss spikes: the loss ratio's smallest margin, absolute and relative
	// to the flow's baseline ratio (k is shared with the delays).
	LossMinAbs float64 `yaml:"loss_min_abs"`
	LossRel    float64 `yaml:"loss_rel"`
}

// DefaultConfig returns the defaults: an alarm needs the delay to exceed the
// baseline by at least 4 deviations, 1 ms and 50 %, after 5 intervals; the
// loss ratio's lower bound to exceed its baseline by 4 deviations, 2
// percentage points and the baseline itself (docs/operations.md measures
// each).
func DefaultConfig() Config {
	return Config{
		Enabled:    true,
		Alpha:      0.1,
		Warmup:     5,
		K:          4,
		MinAbs:     time.Millisecond,
		Rel:        0.5,
		MaxFlows:   10000,
		LossMinAbs: 0.02,
		LossRel:    1,
	}
}

// Validate says which key is wrong and what would be right.
func (c Config) Validate() error {
	var errs []error
	if !(c.Alpha > 0 && c.Alpha <= 1) {
		errs = append(errs, fmt.Errorf("spike.alpha: %v is not in (0, 1]; use e.g. 0.1 (newest interval weighs 10 %%)", c.Alpha))
	}
	if c.Warmup < 1 {
		errs = append(errs, fmt.Errorf("spike.warmup: %d must be at least 1 interval", c.Warmup))
	}
	if !(c.K >= 0) || math.IsInf(c.K, 0) {
		errs = append(errs, fmt.Errorf("spike.k: %v must be a finite number >= 0", c.K))
	}
	if c.MinAbs < 0 {
		errs = append(errs, fmt.Errorf("spike.min_abs: %v must not be negative", c.MinAbs))
	}
	if !(c.Rel >= 0) || math.IsInf(c.Rel, 0) {
		errs = append(errs, fmt.Errorf("spike.rel: %v must be a finite number >= 0", c.Rel))
	}
	if c.MaxFlows < 1 {
		errs = append(errs, fmt.Errorf("spike.max_flows: %d must be at least 1", c.MaxFlows))
	}
	if !(c.LossMinAbs > 0 && c.LossMinAbs < 1) {
		errs = append(errs, fmt.Errorf("spike.loss_min_abs: %v is not in (0, 1); use e.g. 0.02 (2 percentage points of loss above the baseline)", c.LossMinAbs))
	}
	if !(c.LossRel >= 0) || math.IsInf(c.LossRel, 0) {
		errs = append(errs, fmt.Errorf("spike.loss_rel: %v must be a finite number >= 0", c.LossRel))
	}
	if c.K == 0 && c.MinAbs == 0 && c.Rel == 0 {
		errs = append(errs, errors.New("spike.k, spike.min_abs, spike.rel: all zero would alarm on any noise; set at least one"))
	}
	return errors.Join(errs...)
}

// Kinds of spike events.
const (
	KindLatency = "latency" // the mean delay or the p99 spiked: FlowRecord.Spike
	KindLoss    = "loss"    // the loss ratio spiked: FlowRecord.LossSpike
)

// Event is one flow's spike in one interval: of its mean delay, its p99
// (Signal "delay", "p99": values in ns) or its loss ratio ("loss").
type Event struct {
	Sender   string
	Interval int64
	StartNS  int64
	Key      capture.FlowKey
	Kind     string // KindLatency or KindLoss
	Signal   string // "delay", "p99" or "loss": what crossed its threshold
	// The values of that signal: the interval's value, the low end of its
	// confidence interval (delay − ci95; p99 itself; the loss ratio's
	// Wilson lower bound), the baseline before this interval, its mean
	// absolute deviation, and baseline + margin, which Low exceeded.
	Value, Low, Baseline, Dev, Threshold float64
}

// key identifies a flow of a sender.
type key struct {
	sender string
	flow   capture.FlowKey
}

// ewma is one signal's history: its baseline, mean absolute deviation and
// the intervals folded in.
type ewma struct {
	mean, dev float64
	n         int
}

// baseline is one flow's history, also a node of the LRU list.
type baseline struct {
	k                key
	delay, p99, loss ewma
	prev, next       *baseline
}

// Detector holds the baselines. It is not safe for concurrent use: the
// receiver calls Observe from the one goroutine that finalizes intervals.
type Detector struct {
	cfg   Config
	flows map[key]*baseline
	head  baseline // sentinel of the LRU ring: head.next is the most recent
}

// New checks cfg and returns an empty Detector.
func New(cfg Config) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("spike detector: %w", err)
	}
	d := &Detector{cfg: cfg, flows: make(map[key]*baseline)}
	d.head.prev, d.head.next = &d.head, &d.head
	return d, nil
}

// Len returns the number of baselines held (at most cfg.MaxFlows).
func (d *Detector) Len() int { return len(d.flows) }

// Observe compares the records of iv that tracked selects (nil: all) with
// their baselines, sets FlowRecord.Spike (mean delay or p99) and
// FlowRecord.LossSpike on those that spike, folds the interval into the
// baselines, and returns the spikes.
//
// Records or intervals flagged clock-unsynced, and partial intervals,
// neither alarm nor update a baseline: their figures are not comparable
// with the flow's history. Each signal is taken where the record has it:
// the mean delay whatever its source (sketch, samples or both), the p99
// where joined samples give one, the loss ratio where loss is published
// (LossWithheld). A delay without a CI95 updates its baseline but never
// alarms, because nothing bounds its noise.
func (d *Detector) Observe(iv *results.Interval, tracked func(*results.FlowRecord) bool) []Event {
	if d == nil || !d.cfg.Enabled || iv == nil {
		return nil
	}
	if iv.Outcome == results.OutcomeUnsynced || iv.Outcome == results.OutcomePartial {
		return nil
	}
	var events []Event
	for i := range iv.Flows {
		r := &iv.Flows[i]
		delay, p99, loss := finitePtr(r.DelayNS), finitePtr(r.P99NS), lossRatio(r)
		if r.Unsynced || r.Partial || math.IsNaN(delay) && math.IsNaN(p99) && math.IsNaN(loss) {
			continue
		}
		if tracked != nil && !tracked(r) {
			continue
		}
		sender := r.Sender
		if sender == "" {
			sender = iv.Sender
		}
		b := d.touch(key{sender: sender, flow: r.Key})
		ev := Event{Sender: sender, Interval: r.Interval, StartNS: r.StartNS, Key: r.Key, Kind: KindLatency}
		if !math.IsNaN(delay) {
			// A delay without a ci95 never alarms: nothing bounds its noise.
			low := math.Inf(-1)
			if ci := finitePtr(r.CI95NS); ci >= 0 {
				low = delay - ci
			}
			ev.Signal = "delay"
			if d.observe(&b.delay, delay, low, d.margin(&b.delay), &ev) {
				r.Spike = true
				events = append(events, ev)
			}
		}
		if !math.IsNaN(p99) {
			// Like a delay without a ci95, a p99 without its lower bound
			// never alarms.
			low := math.Inf(-1)
			if v := finitePtr(r.P99LowNS); !math.IsNaN(v) {
				low = v
			}
			ev.Signal = "p99"
			if d.observe(&b.p99, p99, low, d.margin(&b.p99), &ev) && !r.Spike {
				r.Spike = true
				events = append(events, ev)
			}
		}
		if !math.IsNaN(loss) {
			ev.Kind, ev.Signal = KindLoss, "loss"
			if d.observe(&b.loss, loss, wilsonLow(loss, r.Packets), d.lossMargin(&b.loss), &ev) {
				r.LossSpike = true
				events = append(events, ev)
			}
		}
	}
	return events
}

// observe folds x into e after its warm-up, comparing low (x's low
// confidence end) with e's baseline + margin; it fills ev's values and
// says whether low exceeded that threshold.
func (d *Detector) observe(e *ewma, x, low, margin float64, ev *Event) bool {
	sample, over, spiked := x, false, false
	if e.n >= d.cfg.Warmup {
		thr := e.mean + margin
		if low > thr {
			spiked = true
			ev.Value, ev.Low, ev.Baseline, ev.Dev, ev.Threshold = x, low, e.mean, e.dev, thr
		}
		// Fold in at most the threshold, and leave dev alone: one
		// outlier barely moves the baseline and does not widen the
		// margin, while a lasting level shift still pulls the baseline
		// up step by step until the new level stops alarming.
		if sample > thr {
			sample, over = thr, true
		}
	}
	d.update(e, sample, over)
	return spiked
}

// LossWithheld says whether a record's loss is withheld (capture drops at
// either end, packets beyond the hold window, clocks unsynchronized): such
// a record's loss is no measurement and neither alarms nor updates the
// loss baseline.
func LossWithheld(r *results.FlowRecord) bool {
	switch r.Status {
	case results.StatusCaptureDrops, results.StatusBeyondWindow, results.StatusClockUnsynced:
		return true
	}
	return r.Unsynced
}

// lossRatio is r's published loss over its packets, NaN where withheld or
// without packets.
func lossRatio(r *results.FlowRecord) float64 {
	loss := finitePtr(r.Loss)
	if LossWithheld(r) || !(r.Packets > 0) || math.IsNaN(loss) {
		return math.NaN()
	}
	return math.Min(1, math.Max(0, loss/r.Packets))
}

// wilsonLow is the lower end of the Wilson score interval (95 %) of a
// ratio p observed over n packets: a few losses among few packets stay
// near 0, as a wide ci95 keeps a small flow's delay from alarming.
func wilsonLow(p, n float64) float64 {
	const z = 1.959963984540054
	zn := z * z / n
	return (p + zn/2 - z*math.Sqrt(p*(1-p)/n+zn/(4*n))) / (1 + zn)
}

func finitePtr(v *float64) float64 {
	if v == nil || math.IsInf(*v, 0) {
		return math.NaN()
	}
	return *v
}

// margin is max(k·dev, min_abs, rel·|baseline|).
func (d *Detector) margin(e *ewma) float64 {
	m := d.cfg.K * e.dev
	m = math.Max(m, float64(d.cfg.MinAbs))
	return math.Max(m, d.cfg.Rel*math.Abs(e.mean))
}

// lossMargin is max(k·dev, loss_min_abs, loss_rel·baseline).
func (d *Detector) lossMargin(e *ewma) float64 {
	return math.Max(math.Max(d.cfg.K*e.dev, d.cfg.LossMinAbs), d.cfg.LossRel*e.mean)
}

// update folds one interval's delay into b (the deviation too unless
// keepDev). During warm-up the weight is 1/(n+1), a plain running mean, so
// the baseline does not lean on its first sample for 1/alpha intervals.
func (d *Detector) update(b *ewma, x float64, keepDev bool) {
	if b.n == 0 {
		b.mean, b.dev, b.n = x, 0, 1
		return
	}
	a := d.cfg.Alpha
	if w := 1 / float64(b.n+1); w > a {
		a = w
	}
	if !keepDev {
		b.dev += a * (math.Abs(x-b.mean) - b.dev)
	}
	b.mean += a * (x - b.mean)
	b.n++
}

// touch returns k's baseline, creating it (and evicting the least recently
// seen one if full), and moves it to the front of the LRU ring.
func (d *Detector) touch(k key) *baseline {
	b, ok := d.flows[k]
	if ok {
		b.prev.next, b.next.prev = b.next, b.prev
	} else {
		if len(d.flows) >= d.cfg.MaxFlows {
			old := d.head.prev
			old.prev.next, old.next.prev = old.next, old.prev
			delete(d.flows, old.k)
			// Reuse the evicted node: steady state allocates only map slots.
			*old = baseline{}
			b = old
		} else {
			b = &baseline{}
		}
		b.k = k
		d.flows[k] = b
	}
	b.prev, b.next = &d.head, d.head.next
	d.head.next.prev = b
	d.head.next = b
	return b
}
