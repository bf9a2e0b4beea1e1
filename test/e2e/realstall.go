package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stall stops one daemon of a pair with SIGSTOP during the traffic and
// resumes it with SIGCONT after For: a process starved of CPU, whose
// capture ring alone keeps the tap's packets meanwhile.
type Stall struct {
	Pair   int           // index in RealOptions.Pairs
	Daemon string        // "receiver" or "sender"
	At     time.Duration // after the traffic begins (later if the stall before it is not yet over)
	For    time.Duration
}

// StallResult is what one stall did: when the daemon was stopped and
// resumed (wall clock, which the daemons' intervals follow), and its
// kernel ring drops (lds_capture_drops_total{reason="kernel"}) before the
// stop and once it had published its capture counters twice after
// resuming (they then hold every drop of the stall).
type StallResult struct {
	Stall
	Stop, Cont              time.Time
	DropsBefore, DropsAfter int64
}

// Drops is what the stall made the daemon's capture drop.
func (s StallResult) Drops() int64 { return s.DropsAfter - s.DropsBefore }

// Intervals are the ids of the intervals of length t the stall overlaps.
func (s StallResult) Intervals(t time.Duration) (first, last int64) {
	return s.Stop.UnixNano() / int64(t), s.Cont.UnixNano() / int64(t)
}

// stallRunner carries out opt.Stalls against the pairs' daemons.
type stallRunner struct {
	ns      string  // the namespace the metrics are scraped from
	daemons []*proc // per pair: receiver, sender
}

func (sr *stallRunner) metricsURL(s Stall) string {
	if s.Daemon == "sender" {
		return realSenderMetricsURL(s.Pair)
	}
	return realMetricsURL(s.Pair)
}

// run performs the stalls in order, relative to begin.
func (sr *stallRunner) run(ctx context.Context, begin time.Time, stalls []Stall) ([]StallResult, error) {
	var out []StallResult
	for _, s := range stalls {
		i := 2*s.Pair + 1
		if s.Daemon == "receiver" {
			i = 2 * s.Pair
		}
		if i >= len(sr.daemons) || (s.Daemon != "receiver" && s.Daemon != "sender") {
			return out, fmt.Errorf("testbed: stall of %q of pair %d: no such daemon", s.Daemon, s.Pair)
		}
		p := sr.daemons[i]
		select {
		case <-time.After(time.Until(begin.Add(s.At))): // the schedule is the test's own
		case <-ctx.Done():
			return out, ctx.Err()
		}
		url := sr.metricsURL(s)
		body, err := httpGetIn(ctx, NetnsPath(sr.ns), url)
		if err != nil {
			return out, fmt.Errorf("testbed: %s metrics before the stall: %w", p.name, err)
		}
		r := StallResult{Stall: s, DropsBefore: kernelDrops(body)}
		pkts := capturePackets(body)
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return out, fmt.Errorf("testbed: SIGSTOP %s: %w", p.name, err)
		}
		r.Stop = time.Now()
		t := time.NewTimer(s.For) // the stall's length is the test's own
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		err = p.cmd.Process.Signal(syscall.SIGCONT)
		r.Cont = time.Now()
		if err != nil {
			return out, fmt.Errorf("testbed: SIGCONT %s: %w", p.name, err)
		}
		if r.DropsAfter, err = sr.afterStall(ctx, url, pkts); err != nil {
			return out, fmt.Errorf("testbed: %s after the stall: %w", p.name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// afterStall waits until the daemon has published its capture counters
// twice since it resumed (lds_capture_packets_total changed twice from
// pkts), then returns its kernel ring drops.
func (sr *stallRunner) afterStall(ctx context.Context, url string, pkts float64) (int64, error) {
	deadline := time.Now().Add(30 * time.Second)
	changes := 0
	for {
		body, err := httpGetIn(ctx, NetnsPath(sr.ns), url)
		if err == nil {
			if n := capturePackets(body); n != pkts {
				pkts = n
				if changes++; changes == 2 {
					return kernelDrops(body), nil
				}
			}
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("its capture counters did not move twice within 30s of SIGCONT (last scrape error: %w)", err)
		}
		select {
		case <-time.After(100 * time.Millisecond): // polling a condition
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
}

// capturePackets reads lds_capture_packets_total (-1 if absent).
func capturePackets(body string) float64 {
	for _, l := range metricLines(body, "lds_capture_packets_total") {
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && f[0] == "lds_capture_packets_total" {
			return v
		}
	}
	return -1
}
