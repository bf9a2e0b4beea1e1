// Package truth is the ground-truth format: one JSONL line per (interval,
// flow) with the exact figures of that flow. tools/gen writes it for its
// synthetic traces, tools/join derives it from two real captures, and
// tools/eval and the end-to-end tests score the receiver's results
// against it.
package truth

import (
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/jsonl"
)

// Record is one line of the ground-truth JSONL: the exact figures of one
// flow in one interval. The flow fields carry the same names and meaning as
// the results JSONL (docs/results.md), so the two join on (interval, src,
// dst, sport, dport, proto). Packets belong to the interval of their send
// time.
type Record struct {
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

// Key returns the record's flow key (IPv4-mapped addresses unmapped); an
// unparsable address, or addresses of two families, is an error.
func (r *Record) Key() (capture.FlowKey, error) {
	s, err := netip.ParseAddr(r.Src)
	if err != nil {
		return capture.FlowKey{}, fmt.Errorf("truth record: src %q: %w", r.Src, err)
	}
	d, err := netip.ParseAddr(r.Dst)
	if err != nil {
		return capture.FlowKey{}, fmt.Errorf("truth record: dst %q: %w", r.Dst, err)
	}
	k, err := capture.FlowKeyFromAddrs(s, d, r.Proto, r.SPort, r.DPort)
	if err != nil {
		return capture.FlowKey{}, fmt.Errorf("truth record: %w", err)
	}
	return k, nil
}

// SetKey fills the record's flow fields from k.
func (r *Record) SetKey(k capture.FlowKey) {
	r.Src, r.Dst = k.SrcAddr().String(), k.DstAddr().String()
	r.SPort, r.DPort, r.Proto = k.SPort, k.DPort, k.Proto
}

// Read reads a ground-truth JSONL stream; a line whose counts disagree
// (lost != sent - received), or that counts no sent packet (a results
// record read as truth has none), is an error.
func Read(r io.Reader) ([]Record, error) {
	return jsonl.Read(r, "truth", 1<<20, func(t *Record) error {
		if t.Sent == 0 {
			return errors.New("sent is 0 or missing, and every truth record counts the packets its flow sent: " +
				"is this a results file? give --truth the file of `ldsctl gen --truth` or `ldsctl join --out`")
		}
		if t.Sent < 0 || t.Received < 0 || t.Received > t.Sent || t.Lost != t.Sent-t.Received {
			return fmt.Errorf("inconsistent counts sent=%d received=%d lost=%d", t.Sent, t.Received, t.Lost)
		}
		return nil
	})
}

// ReadFile reads a ground-truth JSONL file.
func ReadFile(path string) ([]Record, error) {
	return jsonl.ReadFile(path, "truth file", Read)
}
