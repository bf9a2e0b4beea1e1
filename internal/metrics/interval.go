package metrics

import "github.com/prometheus/client_golang/prometheus"

// intervalCollector emits, per sender, whether its stream is connected
// and the health of its latest interval: when it started and completed,
// its flows, its usable cells and its sketch size.
type intervalCollector struct {
	descSet
	connected, start, done, flows, usable, sketchBytes *prometheus.Desc
	r                                                  *Receiver
}

func newIntervalCollector(r *Receiver) *intervalCollector {
	c := &intervalCollector{r: r}
	c.connected = c.add("lds_sender_connected", "1 while the sender's stream is connected, else 0.", "sender")
	c.start = c.add("lds_last_interval_start_timestamp_seconds", "Start (sender clock, Unix seconds) of the latest completed interval.", "sender")
	c.done = c.add("lds_last_interval_completed_timestamp_seconds", "Receiver wall-clock time (Unix seconds) when the latest interval completed.", "sender")
	c.flows = c.add("lds_interval_flows", "Flows estimated in the sender's latest interval.", "sender")
	c.usable = c.add("lds_usable_cell_ratio", "Share of sketch cells usable for estimation in the latest interval.", "sender")
	c.sketchBytes = c.add("lds_interval_sketch_bytes", "Size of the sender's sketch for the latest interval.", "sender")
	return c
}

func (c *intervalCollector) Collect(ch chan<- prometheus.Metric) {
	c.r.eachSender(func(name string, s *senderState) {
		if s.connected != nil {
			gauge(ch, c.connected, boolFloat(*s.connected), name)
		}
		if !s.have {
			return
		}
		gauge(ch, c.flows, float64(s.nFlows), name)
		gauge(ch, c.usable, s.usable, name)
		gauge(ch, c.sketchBytes, s.sketchBytes, name)
		gauge(ch, c.start, float64(s.startNS)/1e9, name)
		gauge(ch, c.done, s.completedUnix, name)
	})
}
