package metrics

import "github.com/prometheus/client_golang/prometheus"

type linkSeries struct {
	class                      string
	delay, stddev, ci95, ratio float64 // NaN = no series
}

// linkCollector emits the link's (LDA) series of each sender's latest
// interval, per traffic class: mean delay, its stddev and ci95, and the
// loss ratio (no series where withheld).
type linkCollector struct {
	descSet
	delay, stddev, ci95, loss *prometheus.Desc
	r                         *Receiver
}

func newLinkCollector(r *Receiver) *linkCollector {
	c := &linkCollector{r: r}
	c.delay = c.add("lds_link_delay_seconds", "LDA estimate of the link's mean one-way delay per traffic class, latest interval.", "sender", "class")
	c.stddev = c.add("lds_link_delay_stddev_seconds", "LDA estimate of the link's delay standard deviation per class, latest interval.", "sender", "class")
	c.ci95 = c.add("lds_link_delay_ci95_seconds", "95% confidence half-width of lds_link_delay_seconds.", "sender", "class")
	c.loss = c.add("lds_link_loss_ratio", "Lost / sent packets of the link per class, latest interval.", "sender", "class")
	return c
}

func (c *linkCollector) Collect(ch chan<- prometheus.Metric) {
	c.r.eachSender(func(name string, s *senderState) {
		for _, l := range s.links { // none before an interval was observed
			gauge(ch, c.delay, l.delay, name, l.class)
			gauge(ch, c.stddev, l.stddev, name, l.class)
			gauge(ch, c.ci95, l.ci95, name, l.class)
			gauge(ch, c.loss, l.ratio, name, l.class)
		}
	})
}
