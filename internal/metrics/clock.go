package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lds-net/lds/internal/ptp"
)

// OwnClock is this host's clock as the daemon's PTP checker sees it now.
type OwnClock struct {
	State      ptp.State
	OffsetNS   int64
	HaveOffset bool // ptp4l has answered at least once: OffsetNS is a reading
}

type clockKey struct{ end, sender string }

type clockState struct {
	state    ptp.State
	offset   float64 // seconds
	errBound float64 // seconds
}

// clockCollector is the receiver's view of both ends' clocks: the PTP
// offset, error bound and state, labelled by end and sender. The
// receiver's own clock, once SetOwnClock gave a reader, is read at each
// scrape and has one series (sender="").
type clockCollector struct {
	descSet
	offset, errBound, state *prometheus.Desc

	mu     sync.Mutex
	clocks map[clockKey]clockState
	own    func() OwnClock // nil: none; read at scrape time
}

func newClockCollector() *clockCollector {
	c := &clockCollector{clocks: map[clockKey]clockState{}}
	c.offset = c.add("lds_ptp_offset_seconds", "PTP offset from the grandmaster reported by ptp4l, per end.", "end", "sender")
	c.errBound = c.add("lds_ptp_error_bound_seconds", "Bound on the clock error at this end.", "end", "sender")
	c.state = c.add("lds_ptp_state", "1 for the current PTP state of each end (only the current state has a series).", "end", "sender", "state")
	return c
}

func (c *clockCollector) set(end, sender string, state ptp.State, offsetNS int64, errBoundNS float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clocks[clockKey{end, sender}] = clockState{state: state, offset: float64(offsetNS) / 1e9, errBound: errBoundNS / 1e9}
}

func (c *clockCollector) setOwn(f func() OwnClock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.own = f
}

// readOwnClock calls the own-clock reader *f (guarded by mu) outside mu,
// as the reader asks the PTP checker; ok is false without a reader.
func readOwnClock(mu *sync.Mutex, f *func() OwnClock) (oc OwnClock, ok bool) {
	mu.Lock()
	own := *f
	mu.Unlock()
	if own == nil {
		return OwnClock{}, false
	}
	return own(), true
}

func (c *clockCollector) Collect(ch chan<- prometheus.Metric) {
	oc, own := readOwnClock(&c.mu, &c.own)
	c.mu.Lock()
	defer c.mu.Unlock()
	if own {
		if oc.HaveOffset {
			gauge(ch, c.offset, float64(oc.OffsetNS)/1e9, "receiver", "")
		}
		gauge(ch, c.state, 1, "receiver", "", string(oc.State))
	}
	for k, cs := range c.clocks {
		if own && k.end == "receiver" {
			continue // the own clock has one series, sender="" (above)
		}
		gauge(ch, c.offset, cs.offset, k.end, k.sender)
		gauge(ch, c.errBound, cs.errBound, k.end, k.sender)
		gauge(ch, c.state, 1, k.end, k.sender, string(cs.state))
	}
}
