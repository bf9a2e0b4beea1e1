// Package results holds the records the receiver publishes: one FlowRecord
// per (interval, flow) — the JSONL contract of docs/results.md — and one
// LinkRecord per (interval, traffic class) for the LDA figures. It depends
// only on capture's flow key: the receiver produces these records, and the
// metrics, API, export and eval packages read them.
package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/lds-net/lds/internal/capture"
)

// FlowRecord is one flow of one interval: the receiver's estimate, held
// in memory with a typed flow key and rendered as one line of the results
// JSONL (MarshalLine, MarshalJSON) where it leaves the process: the results
// file, the API, the exporters. The JSON fields up to ci95_ns are the
// contract (docs/results.md) and never change meaning; fields after it may
// be added. Pointer fields are null in JSON where no estimate exists.
type FlowRecord struct {
	Interval int64 // interval id = floor(sender ns / T)
	StartNS  int64 // interval start, Unix ns
	// Key is the flow: "src" and "dst" in canonical text form, "sport"
	// (ICMP: type<<8 | code), "dport" (ICMP: identifier), "proto" (IP
	// protocol number) in the JSON.
	Key      capture.FlowKey
	DelayNS  *float64 // mean one-way delay
	StddevNS *float64 // delay standard deviation
	// Loss is the estimated lost packets (decode: see LossPoint; paper:
	// LossBound's value); nil where it is withheld (StatusCaptureDrops,
	// StatusBeyondWindow): JSON null, never 0.
	Loss    *float64
	Packets float64  // estimated packets sent
	Samples float64  // effective sample size of the delay estimate
	CI95NS  *float64 // 95 % confidence half-width of DelayNS

	// Additions (allowed by the contract).
	Sender    string   // sender id the interval came from
	Bytes     *float64 // estimated bytes sent, where the sketch keeps bytes
	Estimator string   // "decode" or "paper"
	Partial   bool     // first interval after a start: not complete
	Unsynced  bool     // "clock_unsynced"
	Spike     bool     // latency spike against the flow's baseline
	ErrorNS   *float64 // "clock_error_bound_ns": |offset_A| + |offset_B|
	Status    Status   // StatusMeasured, or why a value is missing or flagged
	// LossPoint is the decoding estimator's point estimate of lost packets.
	// Loss is it where it reaches sketch.LossSupportMin packets (below,
	// it divided by that, under one packet), never above LossBound nor
	// below what the flow's own cells or samples prove (docs/decode.md,
	// "Loss and packets").
	LossPoint *float64

	// Delay quantiles from exactly joined packet samples (docs/results.md,
	// docs/sampling.md): null below sample.MinP50/MinP90/MinP99 samples.
	P50NS        *float64
	P90NS        *float64
	P99NS        *float64
	DelaySamples int // joined samples behind them
	// StddevFrom says which estimator StddevNS comes from: "samples" (the
	// joined samples, at least sample.MinStddev of them) or "sketch" (the
	// sign-hash sums, whose ci95 does not cover the stddev: docs/sketch.md).
	StddevFrom string
	// SampledLost counts samples the sender shipped and the receiver never
	// saw: packets certainly lost (Loss, LossPoint and LossBound are never
	// below it).
	SampledLost int
	// LossBound is the count-min bound on lost packets (never below the
	// truth while a sketch row is unsampled; raised to SampledLost).
	LossBound *float64
	// DelayFrom says where DelayNS comes from: DelayFromSketch,
	// DelayFromSamples (the mean of the joined samples, where the sketch
	// has none) or DelayFromBoth (the two weighed by the inverse of their
	// variances); "" where there is no delay.
	DelayFrom string
	// LossSpike: the flow's loss ratio spiked against its own baseline.
	LossSpike bool
	// P99LowNS is a one-sided 95 % lower confidence bound of P99NS from
	// the same samples (an order statistic, sample.P99LowRank): the p99's
	// counterpart of delay − ci95 for the spike rule. Null with P99NS.
	P99LowNS *float64
	// LossExact: Loss is the exact count from the interval's complete
	// lost-packet list (and Packets the exact count sent), not an estimate.
	LossExact bool
	// Reordered estimates the flow's packets that arrived after a packet
	// of the flow sent later (RFC 4737), from its joined samples, and
	// ReorderExtentNS is the largest lateness among those samples; nil
	// where the flow has too few joined samples.
	Reordered       *float64
	ReorderExtentNS *float64
	// RepairedCells counts the flow's sketch cells (of R·k) that the
	// interval's complete lost-packet list repaired: every listed packet
	// in them had its exact capture time and was taken out, so the cell
	// holds the packets both ends saw and its delays are exact
	// (docs/decode.md, "Repair from the list of lost packets"). 0: none.
	RepairedCells int
}

// Sources of a flow's or link's mean delay (FlowRecord.DelayFrom).
const (
	DelayFromSketch  = "sketch"
	DelayFromSamples = "samples"
	DelayFromBoth    = "both"
)

// LossOr is the record's loss, or def where it is withheld (nil).
func (r *FlowRecord) LossOr(def float64) float64 {
	if r.Loss == nil {
		return def
	}
	return *r.Loss
}

// flowJSON is FlowRecord's JSON shape, field for field in the order of the
// line: what UnmarshalJSON decodes, and what MarshalLine writes by hand
// (its tests hold the two to the same bytes).
type flowJSON struct {
	Interval        int64    `json:"interval"`
	StartNS         int64    `json:"start_ns"`
	Src             string   `json:"src"`
	Dst             string   `json:"dst"`
	SPort           uint16   `json:"sport"`
	DPort           uint16   `json:"dport"`
	Proto           uint8    `json:"proto"`
	DelayNS         *float64 `json:"delay_ns"`
	StddevNS        *float64 `json:"stddev_ns"`
	Loss            *float64 `json:"loss"`
	Packets         float64  `json:"packets"`
	Samples         float64  `json:"samples"`
	CI95NS          *float64 `json:"ci95_ns"`
	Sender          string   `json:"sender,omitempty"`
	Bytes           *float64 `json:"bytes,omitempty"`
	Estimator       string   `json:"estimator,omitempty"`
	Partial         bool     `json:"partial,omitempty"`
	Unsynced        bool     `json:"clock_unsynced,omitempty"`
	ErrorNS         *float64 `json:"clock_error_bound_ns,omitempty"`
	Spike           bool     `json:"spike,omitempty"`
	Status          Status   `json:"status,omitempty"`
	LossPoint       *float64 `json:"loss_point,omitempty"`
	P50NS           *float64 `json:"p50_ns"`
	P90NS           *float64 `json:"p90_ns"`
	P99NS           *float64 `json:"p99_ns"`
	DelaySamples    int      `json:"delay_samples"`
	StddevFrom      string   `json:"stddev_from,omitempty"`
	SampledLost     int      `json:"sampled_lost,omitempty"`
	LossBound       *float64 `json:"loss_bound,omitempty"`
	DelayFrom       string   `json:"delay_from,omitempty"`
	LossSpike       bool     `json:"loss_spike,omitempty"`
	P99LowNS        *float64 `json:"p99_low_ns,omitempty"`
	LossExact       bool     `json:"loss_exact"`
	Reordered       *float64 `json:"reordered"`
	ReorderExtentNS *float64 `json:"reorder_extent_ns"`
	RepairedCells   int      `json:"repaired_cells,omitempty"`
}

// MarshalJSON writes the record's results line (without the newline).
func (r FlowRecord) MarshalJSON() ([]byte, error) {
	b, err := MarshalLine(make([]byte, 0, 512), &r)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil
}

// UnmarshalJSON reads a results line; addresses that do not parse, or of
// two families, are an error.
func (r *FlowRecord) UnmarshalJSON(b []byte) error {
	var j flowJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.Src == "" || j.Dst == "" {
		return errors.New("no src/dst: not a flow record")
	}
	k, err := capture.ParseFlowKey(j.Src, j.Dst, j.Proto, j.SPort, j.DPort)
	if err != nil {
		return err
	}
	*r = FlowRecord{Interval: j.Interval, StartNS: j.StartNS, Key: k, DelayNS: j.DelayNS, StddevNS: j.StddevNS,
		Loss: j.Loss, Packets: j.Packets, Samples: j.Samples, CI95NS: j.CI95NS, Sender: j.Sender, Bytes: j.Bytes,
		Estimator: j.Estimator, Partial: j.Partial, Unsynced: j.Unsynced, ErrorNS: j.ErrorNS, Spike: j.Spike,
		Status: j.Status, LossPoint: j.LossPoint, P50NS: j.P50NS, P90NS: j.P90NS, P99NS: j.P99NS,
		DelaySamples: j.DelaySamples, StddevFrom: j.StddevFrom, SampledLost: j.SampledLost,
		LossBound: j.LossBound, DelayFrom: j.DelayFrom, LossSpike: j.LossSpike, P99LowNS: j.P99LowNS,
		LossExact: j.LossExact, Reordered: j.Reordered, ReorderExtentNS: j.ReorderExtentNS, RepairedCells: j.RepairedCells}
	return nil
}

// LinkRecord is the link-level (LDA) result of one traffic class in one interval.
type LinkRecord struct {
	Interval int64  `json:"interval"`
	StartNS  int64  `json:"start_ns"`
	Sender   string `json:"sender,omitempty"`
	Class    string `json:"class"`
	Sent     uint64 `json:"sent"`     // exact packets seen at the sender tap
	Received uint64 `json:"received"` // exact packets seen at the receiver tap
	// LossRatio is (sent − received) / sent; nil (JSON null) where it is
	// withheld: BeyondWindow or CaptureDrops.
	LossRatio *float64 `json:"loss_ratio"`
	DelayNS   *float64 `json:"delay_ns"`
	StddevNS  *float64 `json:"stddev_ns"`
	Samples   float64  `json:"samples"`
	CI95NS    *float64 `json:"ci95_ns"`
	Partial   bool     `json:"partial,omitempty"`
	Unsynced  bool     `json:"clock_unsynced,omitempty"`
	ErrorNS   *float64 `json:"clock_error_bound_ns,omitempty"`
	// Per-packet delay quantiles of the class from the uniform link sample
	// (docs/sampling.md); null below the same minimums as the flows'.
	P50NS        *float64 `json:"p50_ns,omitempty"`
	P90NS        *float64 `json:"p90_ns,omitempty"`
	P99NS        *float64 `json:"p99_ns,omitempty"`
	DelaySamples int      `json:"delay_samples,omitempty"`
	// DelayFrom: where DelayNS comes from, as FlowRecord.DelayFrom (the
	// LDA or the uniform link sample).
	DelayFrom string `json:"delay_from,omitempty"`
	// Delays are the link sample's exact delays (ns), for the metrics'
	// histogram; not serialized.
	Delays []float64 `json:"-"`
	// BeyondWindow: packets may sit in the wrong interval (delays beyond
	// the hold window); LossRatio is then withheld (null), never a measurement.
	BeyondWindow bool `json:"delay_beyond_window,omitempty"`
	// CaptureDrops: a tap's capture dropped packets that may belong to
	// this interval; LossRatio is then withheld (null).
	CaptureDrops bool `json:"capture_drops,omitempty"`
	// RepairedCells counts the class's LDA cells that the interval's
	// complete lost-packet list repaired (as FlowRecord.RepairedCells);
	// DelayNS, StddevNS, Samples and CI95NS rest on them too, Sent,
	// Received and LossRatio never.
	RepairedCells int `json:"repaired_cells,omitempty"`
}

// Status says why a flow record's value is missing or flagged (JSON
// "status", docs/operations.md "Flow status"): a bounded set, part of the
// results contract.
type Status string

// Flow statuses.
const (
	// StatusMeasured (absent from the JSON): everything was measured.
	StatusMeasured Status = ""
	// StatusClockUnsynced: a PTP check failed at one end; counts and loss
	// are published, delays are not.
	StatusClockUnsynced Status = "clock_unsynced"
	// StatusNoUsableCell: every cell of the flow differs at the two ends
	// and too few of its samples were joined for a delay.
	StatusNoUsableCell Status = "no_usable_cell"
	// StatusNotIdentified: the usable cells do not pin the flow's delay
	// down and too few of its samples were joined for a delay.
	StatusNotIdentified Status = "not_identified"
	// StatusBeyondWindow: packets slower than the receiver's hold window
	// (at most max_delay) may have been placed in the wrong interval and
	// the flow has cells that do not match: its loss is withheld (loss,
	// loss_point and loss_bound null) and its delay comes only from cells
	// that match exactly.
	StatusBeyondWindow Status = "delay_beyond_window"
	// StatusCaptureDrops: either tap's capture dropped packets that may
	// belong to the interval (CaptureDrops): a packet the receiver's
	// capture dropped would count as lost, so loss, loss_point, loss_bound
	// and sampled_lost are withheld; the delays the remaining packets give
	// are kept. Every flow of such an interval has it.
	StatusCaptureDrops Status = "capture_drops"
)

// CaptureDrops counts, for one interval, the packets each tap's capture
// dropped (kernel ring and interface counters) in the reads whose time
// span reaches into the interval: the drops that may have removed packets
// of it. One read can reach into several intervals, so its drops count in
// each of them (docs/results.md, "Capture drops").
type CaptureDrops struct {
	Sender   uint64 `json:"sender"`
	Receiver uint64 `json:"receiver"`
}

// Any reports whether either end dropped a packet.
func (d CaptureDrops) Any() bool { return d.Sender > 0 || d.Receiver > 0 }

// Interval is everything the receiver publishes for one finalized interval
// of one sender: what the metrics, the API and the JSONL writer consume.
type Interval struct {
	Sender   string       `json:"sender"`
	Interval int64        `json:"interval"`
	StartNS  int64        `json:"start_ns"`
	Outcome  Outcome      `json:"outcome"`
	Flows    []FlowRecord `json:"flows"`
	Links    []LinkRecord `json:"links"`
	// Health of the estimate. SenderDrops and ReceiverDrops are the capture
	// drops each end read when it closed this interval (each drop counted
	// once, in one interval); CaptureDrops the drops that may have removed
	// packets of this interval (nil: none).
	UsableCellRatio float64       `json:"usable_cell_ratio"`
	SenderDrops     uint64        `json:"sender_drops"`
	ReceiverDrops   uint64        `json:"receiver_drops"`
	CaptureDrops    *CaptureDrops `json:"capture_drops,omitempty"`
	SketchBytes     uint64        `json:"sketch_bytes"`
	// BeyondWindow: packets slower than the hold window may sit in the
	// wrong interval (this one's or a neighbour's): flows with cells that
	// do not match have StatusBeyondWindow and no loss.
	BeyondWindow bool `json:"delay_beyond_window,omitempty"`
	// Touched marks the flows (same index as Flows) with a cell that does
	// not match at both ends: the ones a misplaced packet can affect.
	Touched []bool `json:"-"`
	// LostList says whether the interval's lost-packet list is complete
	// (nil without lost-packet tables); Lost is the list (served by
	// /api/v1/lost and written to receiver.lost_file, not in this JSON).
	LostList *LostSummary `json:"lost_list,omitempty"`
	Lost     []LostPacket `json:"-"`
	// ReorderedRatio is the share of the interval's joined flow samples
	// that arrived after a sample of their flow sent later (nil: none
	// joined).
	ReorderedRatio *float64 `json:"reordered_ratio,omitempty"`
}

// FlagBeyondWindow marks the interval as holding misplaced packets:
// every touched flow gets StatusBeyondWindow and its loss withheld, every
// link its loss ratio withheld.
func (iv *Interval) FlagBeyondWindow() {
	iv.BeyondWindow = true
	for i := range iv.Flows {
		if i < len(iv.Touched) && !iv.Touched[i] {
			continue
		}
		f := &iv.Flows[i]
		if f.Status == StatusCaptureDrops {
			continue // already withheld, for the reason that explains it
		}
		f.Status, f.Loss, f.LossPoint, f.LossBound = StatusBeyondWindow, nil, nil, nil
	}
	// The two ends' tables then differ by misplaced packets too: the list
	// is no list of losses, and no loss is exact.
	iv.markLostIncomplete(string(StatusBeyondWindow))
	for i := range iv.Links {
		iv.Links[i].BeyondWindow, iv.Links[i].LossRatio = true, nil
	}
}

// FlagCaptureDrops marks the interval as one where a tap's capture dropped
// packets that may belong to it (d, added to what it already carries):
// every flow gets StatusCaptureDrops with its loss withheld and its delays
// kept, every link its loss ratio withheld, and the lost-packet list is
// marked incomplete (reason capture_drops). A no-op when d is zero.
func (iv *Interval) FlagCaptureDrops(d CaptureDrops) {
	if !d.Any() {
		return
	}
	if iv.CaptureDrops == nil {
		iv.CaptureDrops = &CaptureDrops{}
	}
	iv.CaptureDrops.Sender += d.Sender
	iv.CaptureDrops.Receiver += d.Receiver
	// A packet a capture dropped shows in the lost-packet list as lost or
	// extra: the list is no list of network losses, and no loss is exact.
	iv.markLostIncomplete(string(StatusCaptureDrops))
	for i := range iv.Flows {
		f := &iv.Flows[i]
		f.Status, f.Loss, f.LossPoint, f.LossBound, f.SampledLost = StatusCaptureDrops, nil, nil, nil, 0
	}
	for i := range iv.Links {
		iv.Links[i].CaptureDrops, iv.Links[i].LossRatio = true, nil
	}
}

// Outcome is what became of one interval of one sender (JSON "outcome"
// of /api/v1/intervals, the outcome label of lds_intervals_total): a
// bounded set, part of the results contract.
type Outcome string

// Interval outcomes.
const (
	OutcomeMatched    Outcome = "matched"
	OutcomePartial    Outcome = "partial"
	OutcomeVoidedGap  Outcome = "voided_seq_gap"
	OutcomeNoSender   Outcome = "no_sender_sketch"
	OutcomeUnsynced   Outcome = "clock_unsynced"
	OutcomeDuplicate  Outcome = "duplicate"
	OutcomeNoReceiver Outcome = "no_receiver_sketch"
	OutcomeFailed     Outcome = "estimation_failed"
)

// Float returns a pointer to v, or nil where v is NaN or infinite, so that
// missing estimates serialize as JSON null.
func Float(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// MarshalLine appends the JSON of r and a newline to b: the same bytes as
// encoding/json's Marshal of r's flowJSON (tested), written by hand because
// the receiver writes one line per flow and interval and reflection cost
// several times more than the appends. Addresses need no escaping.
func MarshalLine(b []byte, r *FlowRecord) ([]byte, error) {
	if r.Loss != nil && (math.IsNaN(*r.Loss) || math.IsInf(*r.Loss, 0)) {
		return b, fmt.Errorf("results: flow record of interval %d has a non-finite loss %v (JSON cannot carry it; withheld loss is nil)", r.Interval, *r.Loss)
	}
	for _, v := range [...]float64{r.Packets, r.Samples} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return b, fmt.Errorf("results: flow record of interval %d has a non-finite count %v (JSON cannot carry it)", r.Interval, v)
		}
	}
	b = append(b, `{"interval":`...)
	b = strconv.AppendInt(b, r.Interval, 10)
	b = append(b, `,"start_ns":`...)
	b = strconv.AppendInt(b, r.StartNS, 10)
	b = append(b, `,"src":"`...)
	b = r.Key.AppendSrc(b)
	b = append(b, `","dst":"`...)
	b = r.Key.AppendDst(b)
	b = append(b, `","sport":`...)
	b = strconv.AppendUint(b, uint64(r.Key.SPort), 10)
	b = append(b, `,"dport":`...)
	b = strconv.AppendUint(b, uint64(r.Key.DPort), 10)
	b = append(b, `,"proto":`...)
	b = strconv.AppendUint(b, uint64(r.Key.Proto), 10)
	b = append(b, `,"delay_ns":`...)
	b = appendFloatPtr(b, r.DelayNS)
	b = append(b, `,"stddev_ns":`...)
	b = appendFloatPtr(b, r.StddevNS)
	b = append(b, `,"loss":`...)
	b = appendFloatPtr(b, r.Loss)
	b = append(b, `,"packets":`...)
	b = appendFloat(b, r.Packets)
	b = append(b, `,"samples":`...)
	b = appendFloat(b, r.Samples)
	b = append(b, `,"ci95_ns":`...)
	b = appendFloatPtr(b, r.CI95NS)
	if r.Sender != "" {
		b = append(b, `,"sender":`...)
		b = appendString(b, r.Sender)
	}
	if r.Bytes != nil {
		b = append(b, `,"bytes":`...)
		b = appendFloatPtr(b, r.Bytes)
	}
	if r.Estimator != "" {
		b = append(b, `,"estimator":`...)
		b = appendString(b, r.Estimator)
	}
	if r.Partial {
		b = append(b, `,"partial":true`...)
	}
	if r.Unsynced {
		b = append(b, `,"clock_unsynced":true`...)
	}
	if r.ErrorNS != nil {
		b = append(b, `,"clock_error_bound_ns":`...)
		b = appendFloatPtr(b, r.ErrorNS)
	}
	if r.Spike {
		b = append(b, `,"spike":true`...)
	}
	if r.Status != StatusMeasured {
		b = append(b, `,"status":`...)
		b = appendString(b, string(r.Status))
	}
	if r.LossPoint != nil {
		b = append(b, `,"loss_point":`...)
		b = appendFloatPtr(b, r.LossPoint)
	}
	b = append(b, `,"p50_ns":`...)
	b = appendFloatPtr(b, r.P50NS)
	b = append(b, `,"p90_ns":`...)
	b = appendFloatPtr(b, r.P90NS)
	b = append(b, `,"p99_ns":`...)
	b = appendFloatPtr(b, r.P99NS)
	b = append(b, `,"delay_samples":`...)
	b = strconv.AppendInt(b, int64(r.DelaySamples), 10)
	if r.StddevFrom != "" {
		b = append(b, `,"stddev_from":`...)
		b = appendString(b, r.StddevFrom)
	}
	if r.SampledLost != 0 {
		b = append(b, `,"sampled_lost":`...)
		b = strconv.AppendInt(b, int64(r.SampledLost), 10)
	}
	if r.LossBound != nil {
		b = append(b, `,"loss_bound":`...)
		b = appendFloatPtr(b, r.LossBound)
	}
	if r.DelayFrom != "" {
		b = append(b, `,"delay_from":`...)
		b = appendString(b, r.DelayFrom)
	}
	if r.LossSpike {
		b = append(b, `,"loss_spike":true`...)
	}
	if r.P99LowNS != nil {
		b = append(b, `,"p99_low_ns":`...)
		b = appendFloatPtr(b, r.P99LowNS)
	}
	if r.LossExact {
		b = append(b, `,"loss_exact":true`...)
	} else {
		b = append(b, `,"loss_exact":false`...)
	}
	b = append(b, `,"reordered":`...)
	b = appendFloatPtr(b, r.Reordered)
	b = append(b, `,"reorder_extent_ns":`...)
	b = appendFloatPtr(b, r.ReorderExtentNS)
	if r.RepairedCells != 0 {
		b = append(b, `,"repaired_cells":`...)
		b = strconv.AppendInt(b, int64(r.RepairedCells), 10)
	}
	return append(b, "}\n"...), nil
}

// appendFloatPtr writes null for nil. A pointer to a non-finite value
// (which Float never makes) is written as null too rather than as invalid
// JSON.
func appendFloatPtr(b []byte, v *float64) []byte {
	if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
		return append(b, "null"...)
	}
	return appendFloat(b, *v)
}

// appendFloat formats a finite v as encoding/json does: the shortest
// representation, exponent form below 1e-6 and from 1e21, with "e-07"
// shortened to "e-7".
func appendFloat(b []byte, v float64) []byte {
	abs := math.Abs(v)
	f := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		f = 'e'
	}
	b = strconv.AppendFloat(b, v, f, -1, 64)
	if f == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendString quotes s; addresses and our own status words are plain
// ASCII, anything else (a sender id with odd bytes) goes through
// encoding/json so that the escaping stays exactly its own.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // a string always marshals
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
