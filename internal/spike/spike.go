// Package spike flags per-flow latency spikes: a flow's mean delay in one
// interval compared with that flow's own baseline over past intervals.
//
// The rule is deliberately conservative so that small, noisy flows never page
// anyone. A record spikes when the lower end of its 95 % confidence interval
// still lies above the baseline by a margin:
//
//	delay − ci95 > baseline + max(k·dev, min_abs, rel·baseline)
//
// baseline is an EWMA of the flow's mean delay, dev an EWMA of its absolute
// deviation from the baseline (the RTTVAR idea of TCP), and no record alarms
// before the flow has warmup intervals of history. Memory is bounded: at most
// max_flows baselines are kept, the least recently seen evicted first.
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
}

// DefaultConfig returns the defaults: an alarm needs the delay to exceed the
// baseline by at least 4 deviations, 1 ms and 50 %, after 5 intervals.
func DefaultConfig() Config {
	return Config{
		Enabled:  true,
		Alpha:    0.1,
		Warmup:   5,
		K:        4,
		MinAbs:   time.Millisecond,
		Rel:      0.5,
		MaxFlows: 10000,
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
	if c.K == 0 && c.MinAbs == 0 && c.Rel == 0 {
		errs = append(errs, errors.New("spike.k, spike.min_abs, spike.rel: all zero would alarm on any noise; set at least one"))
	}
	return errors.Join(errs...)
}

// Event is one flow's spike in one interval.
type Event struct {
	Sender      string
	Interval    int64
	StartNS     int64
	Key         capture.FlowKey
	DelayNS     float64 // the interval's mean delay estimate
	CI95NS      float64 // its 95 % half-width
	BaselineNS  float64 // the baseline before this interval
	DevNS       float64 // the baseline's mean absolute deviation
	ThresholdNS float64 // baseline + margin: delay − ci95 exceeded this
}

// key identifies a flow of a sender.
type key struct {
	sender string
	flow   capture.FlowKey
}

// baseline is one flow's history, also a node of the LRU list.
type baseline struct {
	k          key
	mean, dev  float64
	n          int // intervals folded in
	prev, next *baseline
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
// their baselines, sets FlowRecord.Spike on those that spike, folds the
// interval into the baselines, and returns the spikes.
//
// Records without a delay, records or intervals flagged clock-unsynced, and
// partial intervals neither alarm nor update a baseline: their delay is not
// comparable with the flow's history. A record without a CI95 updates its
// baseline but never alarms, because nothing bounds its noise.
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
		if r.Unsynced || r.Partial || r.DelayNS == nil || math.IsNaN(*r.DelayNS) || math.IsInf(*r.DelayNS, 0) {
			continue
		}
		if tracked != nil && !tracked(r) {
			continue
		}
		sender := r.Sender
		if sender == "" {
			sender = iv.Sender
		}
		k := key{sender: sender, flow: r.Key}
		b := d.touch(k)
		x := *r.DelayNS
		sample, over := x, false
		if b.n >= d.cfg.Warmup {
			thr := b.mean + d.margin(b)
			if r.CI95NS != nil && *r.CI95NS >= 0 && x-*r.CI95NS > thr {
				r.Spike = true
				events = append(events, Event{
					Sender: sender, Interval: r.Interval, StartNS: r.StartNS,
					Key:     r.Key,
					DelayNS: x, CI95NS: *r.CI95NS, BaselineNS: b.mean, DevNS: b.dev, ThresholdNS: thr,
				})
			}
			// Fold in at most the threshold, and leave dev alone: one
			// outlier barely moves the baseline and does not widen the
			// margin, while a lasting level shift still pulls the baseline
			// up step by step until the new level stops alarming.
			if sample > thr {
				sample, over = thr, true
			}
		}
		d.update(b, sample, over)
	}
	return events
}

// margin is max(k·dev, min_abs, rel·|baseline|).
func (d *Detector) margin(b *baseline) float64 {
	m := d.cfg.K * b.dev
	m = math.Max(m, float64(d.cfg.MinAbs))
	return math.Max(m, d.cfg.Rel*math.Abs(b.mean))
}

// update folds one interval's delay into b (the deviation too unless
// keepDev). During warm-up the weight is 1/(n+1), a plain running mean, so
// the baseline does not lean on its first sample for 1/alpha intervals.
func (d *Detector) update(b *baseline, x float64, keepDev bool) {
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
