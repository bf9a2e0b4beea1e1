// Package results holds the records the receiver publishes: one FlowRecord
// per (interval, flow) — the JSONL contract of DESIGN.md §6 — and one
// LinkRecord per (interval, traffic class) for the LDA figures. It is a leaf:
// the receiver produces these, and the metrics, API and eval packages read them.
package results

import (
	"encoding/json"
	"math"
)

// FlowRecord is one line of the results JSONL. The fields up to CI95NS are
// the contract (DESIGN.md §6) and never change meaning; fields after it may be
// added. Pointer fields are null in JSON where no estimate exists.
type FlowRecord struct {
	Interval int64    `json:"interval"`  // interval id = floor(sender ns / T)
	StartNS  int64    `json:"start_ns"`  // interval start, Unix ns
	Src      string   `json:"src"`       // canonical text form
	Dst      string   `json:"dst"`       //
	SPort    uint16   `json:"sport"`     // ICMP: type<<8 | code
	DPort    uint16   `json:"dport"`     // ICMP: identifier
	Proto    uint8    `json:"proto"`     // IP protocol number
	DelayNS  *float64 `json:"delay_ns"`  // mean one-way delay
	StddevNS *float64 `json:"stddev_ns"` // delay standard deviation
	Loss     float64  `json:"loss"`      // estimated lost packets
	Packets  float64  `json:"packets"`   // estimated packets sent
	Samples  float64  `json:"samples"`   // effective sample size of the delay estimate
	CI95NS   *float64 `json:"ci95_ns"`   // 95 % confidence half-width of DelayNS

	// Additions (allowed by the contract).
	Sender    string   `json:"sender,omitempty"`    // sender id the interval came from
	Bytes     *float64 `json:"bytes,omitempty"`     // estimated bytes sent, where the sketch keeps bytes
	Estimator string   `json:"estimator,omitempty"` // "decode" or "paper"
	Partial   bool     `json:"partial,omitempty"`   // first interval after a start: not complete
	Unsynced  bool     `json:"clock_unsynced,omitempty"`
	ErrorNS   *float64 `json:"clock_error_bound_ns,omitempty"` // |offset_A| + |offset_B|
	Spike     bool     `json:"spike,omitempty"`                // latency spike against the flow's baseline
	Status    string   `json:"status,omitempty"`               // "", or why no delay is given
	// LossPoint is the decoding estimator's point estimate of lost packets
	// (Loss stays the conservative count-min bound).
	LossPoint *float64 `json:"loss_point,omitempty"`
}

// LinkRecord is the link-level (LDA) result of one traffic class in one interval.
type LinkRecord struct {
	Interval  int64    `json:"interval"`
	StartNS   int64    `json:"start_ns"`
	Sender    string   `json:"sender,omitempty"`
	Class     string   `json:"class"`
	Sent      uint64   `json:"sent"`     // exact packets seen at the sender tap
	Received  uint64   `json:"received"` // exact packets seen at the receiver tap
	LossRatio float64  `json:"loss_ratio"`
	DelayNS   *float64 `json:"delay_ns"`
	StddevNS  *float64 `json:"stddev_ns"`
	Samples   float64  `json:"samples"`
	CI95NS    *float64 `json:"ci95_ns"`
	Partial   bool     `json:"partial,omitempty"`
	Unsynced  bool     `json:"clock_unsynced,omitempty"`
	ErrorNS   *float64 `json:"clock_error_bound_ns,omitempty"`
}

// Interval is everything the receiver publishes for one finalized interval
// of one sender: what the metrics, the API and the JSONL writer consume.
type Interval struct {
	Sender   string       `json:"sender"`
	Interval int64        `json:"interval"`
	StartNS  int64        `json:"start_ns"`
	Outcome  string       `json:"outcome"` // see Outcome* constants
	Flows    []FlowRecord `json:"flows"`
	Links    []LinkRecord `json:"links"`
	// Health of the estimate.
	UsableCellRatio float64 `json:"usable_cell_ratio"`
	SenderDrops     uint64  `json:"sender_drops"`
	ReceiverDrops   uint64  `json:"receiver_drops"`
	SketchBytes     uint64  `json:"sketch_bytes"`
}

// Interval outcomes, a bounded set used as a metric label.
const (
	OutcomeMatched    = "matched"
	OutcomePartial    = "partial"
	OutcomeVoidedGap  = "voided_seq_gap"
	OutcomeNoSender   = "no_sender_sketch"
	OutcomeUnsynced   = "clock_unsynced"
	OutcomeDuplicate  = "duplicate"
	OutcomeNoReceiver = "no_receiver_sketch"
	OutcomeFailed     = "estimation_failed"
)

// Float returns a pointer to v, or nil where v is NaN or infinite, so that
// missing estimates serialize as JSON null.
func Float(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// MarshalLine appends the JSON of r and a newline to b.
func MarshalLine(b []byte, r *FlowRecord) ([]byte, error) {
	j, err := json.Marshal(r)
	if err != nil {
		return b, err
	}
	b = append(b, j...)
	return append(b, '\n'), nil
}
