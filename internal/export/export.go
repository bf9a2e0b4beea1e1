// Package export sends every published per-flow record to where fleets keep
// flow data: IPFIX collectors (RFC 7011, with RFC 9951's delay elements) and
// Kafka topics (protobuf, proto/lds/export/v1). Publishing never waits for
// the network: each exporter has a bounded queue, and a record that does not
// fit is dropped and counted (lds_export_dropped_records_total), so that a
// dead collector or a stalled broker cannot slow capture or estimation.
package export

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lds-net/lds/internal/results"
)

// Metrics receives the exporters' counters; internal/metrics implements it
// with bounded labels (exporter kind and configured collector).
type Metrics interface {
	ExportSent(kind, collector string, n int)
	ExportDropped(kind, collector, reason string, n int)
	ExportError(kind, collector string)
	ExportUp(kind, collector string, up bool)
	ExportQueued(kind, collector string, n int)
}

// Drop reasons (a bounded label).
const (
	DropQueueFull = "queue_full" // the exporter's buffer was full when the interval was published
	DropSendError = "send_error" // the transport failed the message that held the record
	DropStop      = "stop"       // still buffered when the flush timeout ran out at stop
	DropEncode    = "encode"     // the record could not be encoded
)

// Exporter kinds (a bounded label).
const (
	KindIPFIX = "ipfix"
	KindKafka = "kafka"
)

// Options change how exporters behave beyond the configuration.
type Options struct {
	// Blocking makes Publish wait for room instead of dropping: for
	// `ldsctl replay`, which reads files that can wait, so that a backfill
	// loses nothing. The daemon never sets it.
	Blocking bool
	// IntervalNS is the interval length (flowEndMilliseconds = start + it).
	IntervalNS int64
}

// sink is one exporting process: one collector, or the Kafka producer.
type sink interface {
	kind() string
	name() string
	queue() *queue
	// run sends until ctx ends, then flushes what it holds until the
	// flush deadline.
	run(ctx context.Context, flushBy func() time.Time)
}

// Set is every configured exporter. The zero of *Set (nil) exports nothing.
type Set struct {
	cfg   Config
	opt   Options
	log   *slog.Logger
	m     Metrics
	sinks []sink
}

// New builds the exporters of cfg (nil when none is configured).
func New(cfg Config, opt Options, m Metrics, log *slog.Logger) (*Set, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Set{cfg: cfg, opt: opt, log: log, m: m}
	for _, c := range cfg.IPFIX.Collectors {
		s.sinks = append(s.sinks, newIPFIXSink(cfg.IPFIX, c, opt.IntervalNS, m, log))
	}
	if len(cfg.Kafka.Brokers) > 0 {
		k, err := newKafkaSink(cfg.Kafka, opt.IntervalNS, m, log)
		if err != nil {
			return nil, fmt.Errorf("export.kafka: %w", err)
		}
		s.sinks = append(s.sinks, k)
	}
	for _, k := range s.sinks {
		m.ExportUp(k.kind(), k.name(), false)
		m.ExportQueued(k.kind(), k.name(), 0)
	}
	return s, nil
}

// Publish hands the interval's flow records to every exporter. It never
// blocks (unless Options.Blocking): records that do not fit an exporter's
// queue are dropped there and counted.
func (s *Set) Publish(iv *results.Interval) {
	if s == nil {
		return
	}
	s.publishLost(iv) // lost.go
	if len(iv.Flows) == 0 {
		return
	}
	for _, k := range s.sinks {
		q := k.queue()
		n := q.offer(iv.Sender, iv.Flows, s.opt.Blocking)
		if n < len(iv.Flows) {
			s.m.ExportDropped(k.kind(), k.name(), DropQueueFull, len(iv.Flows)-n)
			if q.noteFull() {
				s.log.Warn("export queue full: records dropped (the collector is slower than the results or unreachable)",
					"exporter", k.kind(), "collector", k.name(), "queue_records", q.cap,
					"fix", "check the collector; raise export."+k.kind()+".queue_records for bursts")
			}
		}
		s.m.ExportQueued(k.kind(), k.name(), q.len())
	}
}

// Run runs the exporters until ctx ends, then flushes what they hold for at
// most export.flush_timeout and returns. Export failures never end Run: they
// are counted and logged once per state change.
func (s *Set) Run(ctx context.Context) {
	if s == nil {
		return
	}
	var deadline struct {
		sync.Once
		t time.Time
	}
	flushBy := func() time.Time {
		deadline.Do(func() { deadline.t = time.Now().Add(s.cfg.FlushTimeout) })
		return deadline.t
	}
	var wg sync.WaitGroup
	for _, k := range s.sinks {
		wg.Add(1)
		go func() { defer wg.Done(); k.run(ctx, flushBy) }()
	}
	<-ctx.Done()
	for _, k := range s.sinks {
		k.queue().close() // no more records; a blocked Publish returns
	}
	wg.Wait()
}

// stateLog logs an exporter's transitions between up and down once each,
// not once per record or message. A down exporter is up again after
// recoverStreak successes in a row, so that a UDP collector whose port is
// closed (every other write reports the ICMP error of the one before) stays
// down instead of flapping.
type stateLog struct {
	kind, name string
	log        *slog.Logger
	m          Metrics
	up         bool
	known      bool
	streak     int
}

const recoverStreak = 8

func (l *stateLog) ok() {
	if l.up {
		return
	}
	l.streak++
	if l.known && l.streak < recoverStreak {
		return
	}
	if l.known {
		l.log.Info("export recovered", "exporter", l.kind, "collector", l.name)
	}
	l.up, l.known = true, true
	l.m.ExportUp(l.kind, l.name, true)
}

func (l *stateLog) fail(err error) {
	l.m.ExportError(l.kind, l.name)
	l.streak = 0
	if l.up || !l.known {
		l.log.Warn("export failing: records are dropped and counted until it recovers", "exporter", l.kind, "collector", l.name, "err", err)
		l.up, l.known = false, true
		l.m.ExportUp(l.kind, l.name, false)
	}
}
