// Package metrics exports the sender's and the receiver's Prometheus series
// on a private registry, with per-flow cardinality bounded by configuration:
// per-flow series exist only for the heaviest top_n flows of each sender's
// latest interval plus (at most top_n) flows matched by watch rules. The full
// per-flow picture is in the results API (internal/api), not here.
package metrics

import (
	"errors"
	"fmt"
	"math"
	"net"

	"github.com/prometheus/exporter-toolkit/web"

	"github.com/lds-net/lds/internal/match"
)

// Config is the `metrics:` section of both daemons' configuration.
type Config struct {
	Listen    string       `yaml:"listen"`        // host:port of /metrics (and the results API)
	WebConfig string       `yaml:"web_config"`    // exporter-toolkit web config file (TLS, basic auth); empty = plain HTTP
	TopN      int          `yaml:"top_n"`         // per-flow series for the heaviest N flows per sender
	Watch     []match.Rule `yaml:"watch"`         // flows that always get series (at most top_n of them per sender)
	Buckets   []float64    `yaml:"delay_buckets"` // seconds, for lds_flow_mean_delay_seconds
	// SpikeWindow is how many intervals lds_flow_spike remembers: a spike of
	// one 1 s interval stays visible to scrapes taken seconds apart.
	SpikeWindow int `yaml:"spike_window"`
}

// MaxTopN caps top_n: each tracked flow costs several series per sender.
const MaxTopN = 10000

// DefaultBuckets span 10 µs to 1 s, dense around the default max_delay (50 ms).
func DefaultBuckets() []float64 {
	return []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1}
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Listen: ":9465", TopN: 100, Buckets: DefaultBuckets(), SpikeWindow: 60}
}

// Validate says which key is wrong and what would be right.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("metrics.listen: %q is not host:port (e.g. \":9465\" or \"127.0.0.1:9465\"): %w", c.Listen, err))
	}
	if c.WebConfig != "" {
		if err := web.Validate(c.WebConfig); err != nil {
			errs = append(errs, fmt.Errorf("metrics.web_config: %s: %w (see the exporter-toolkit web configuration format)", c.WebConfig, err))
		}
	}
	if c.TopN < 1 || c.TopN > MaxTopN {
		errs = append(errs, fmt.Errorf("metrics.top_n: %d must be in 1..%d", c.TopN, MaxTopN))
	}
	if c.SpikeWindow < 1 || c.SpikeWindow > 100000 {
		errs = append(errs, fmt.Errorf("metrics.spike_window: %d must be in 1..100000 intervals (default 60)", c.SpikeWindow))
	}
	if _, err := match.CompileAll("metrics.watch", c.Watch); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for i, r := range c.Watch {
		if r.Name == "" {
			errs = append(errs, fmt.Errorf("metrics.watch[%d].name: required: it is the watch label of the flow series", i))
		} else if seen[r.Name] {
			errs = append(errs, fmt.Errorf("metrics.watch[%d].name: %q used twice; names must be unique", i, r.Name))
		}
		seen[r.Name] = true
	}
	if len(c.Buckets) == 0 {
		errs = append(errs, errors.New("metrics.delay_buckets: empty; give upper bounds in seconds, e.g. [0.0001, 0.001, 0.01]"))
	}
	for i, b := range c.Buckets {
		if math.IsNaN(b) || math.IsInf(b, 0) {
			errs = append(errs, fmt.Errorf("metrics.delay_buckets[%d]: %v is not a finite number of seconds", i, b))
		} else if i > 0 && !(b > c.Buckets[i-1]) {
			errs = append(errs, fmt.Errorf("metrics.delay_buckets[%d]: %v must be greater than the bucket before it (%v)", i, b, c.Buckets[i-1]))
		}
	}
	return errors.Join(errs...)
}
