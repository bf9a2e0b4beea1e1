// Package join computes exact ground truth from two captures: every packet
// of the sender tap is looked up at the receiver tap by its identity (flow
// key and packet hash), giving its one-way delay or its loss. This is the
// manual alternative lds replaces, and the reference its tests and
// `ldsctl eval` measure against.
package join

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/truth"
)

// Flow is the truth about one flow in one interval (by send time).
type Flow struct {
	Interval int64
	Key      capture.FlowKey
	Sent     uint64
	Received uint64
	MeanNS   float64 // over received packets; NaN if none
	StddevNS float64 // population stddev over received packets; NaN if none
}

// Lost is the number of packets sent and not received.
func (f *Flow) Lost() uint64 { return f.Sent - f.Received }

// Result of a join.
type Result struct {
	Flows      map[FlowID]*Flow
	Packets    uint64 // sender-tap packets measured
	Unmatched  uint64 // receiver-tap packets with no sender-tap twin
	Duplicates uint64 // identities seen twice at one tap (not joinable)
	// Truncated: the captures whose last record was cut short (each one's
	// complete records were joined, the cut one dropped).
	Truncated []*capture.TruncatedError
}

// FlowID names a flow in an interval.
type FlowID struct {
	Interval int64
	Key      capture.FlowKey
}

type ident struct {
	key  capture.FlowKey
	hash uint64
}

// Match is the per-packet join of two captures: each sender-tap packet
// identity, with its send time and, if it reached the receiver tap, its
// receive time.
type Match struct {
	sent       map[ident]fate
	Unmatched  uint64 // receiver-tap packets with no sender-tap twin
	Duplicates uint64 // identities seen twice at the sender tap (not joinable)
	Truncated  []*capture.TruncatedError
}

type fate struct {
	send, recv int64
	dup, got   bool
}

// MatchFiles reads the sender capture, then the receiver capture, joining
// packets by identity (flow key and packet hash, as p computes them).
func MatchFiles(senderPcap, receiverPcap string, p *capture.Parser) (*Match, error) {
	m := &Match{sent: map[ident]fate{}}
	err := capture.EachPacket(senderPcap, p, func(pk *capture.Packet) bool {
		id := ident{pk.Key, pk.PktHash}
		if f, ok := m.sent[id]; ok {
			f.dup = true
			m.sent[id] = f
			m.Duplicates++
			return true
		}
		m.sent[id] = fate{send: pk.TS}
		return true
	})
	err = m.cut(err)
	if err != nil {
		return nil, fmt.Errorf("sender capture %s: %w", senderPcap, err)
	}
	err = capture.EachPacket(receiverPcap, p, func(pk *capture.Packet) bool {
		id := ident{pk.Key, pk.PktHash}
		f, ok := m.sent[id]
		if !ok || f.dup || f.got {
			m.Unmatched++
			return true
		}
		f.recv, f.got = pk.TS, true
		m.sent[id] = f
		return true
	})
	err = m.cut(err)
	if err != nil {
		return nil, fmt.Errorf("receiver capture %s: %w", receiverPcap, err)
	}
	return m, nil
}

// cut records a capture cut short (its complete records were joined) and
// passes any other error on.
func (m *Match) cut(err error) error {
	if te := (*capture.TruncatedError)(nil); errors.As(err, &te) {
		m.Truncated = append(m.Truncated, te)
		return nil
	}
	return err
}

// Lookup gives the fate of a sender-tap packet: its receive time and
// whether it arrived; joinable is false for an identity seen twice at the
// sender (or never).
func (m *Match) Lookup(key capture.FlowKey, pktHash uint64) (recv int64, got, joinable bool) {
	f, ok := m.sent[ident{key, pktHash}]
	if !ok || f.dup {
		return 0, false, false
	}
	return f.recv, f.got, true
}

// Delays returns the one-way delay (ns) of every joinable packet that
// arrived, in no particular order.
func (m *Match) Delays() []float64 {
	var out []float64
	for _, f := range m.sent {
		if f.got && !f.dup {
			out = append(out, float64(f.recv-f.send))
		}
	}
	return out
}

// Files joins two capture files with the given capture configuration
// (identity, selection) and interval length t (ns).
func Files(senderPcap, receiverPcap string, cfg capture.Config, t int64) (*Result, error) {
	p, err := capture.NewParser(cfg)
	if err != nil {
		return nil, err
	}
	m, err := MatchFiles(senderPcap, receiverPcap, p)
	if err != nil {
		return nil, err
	}
	res := &Result{Flows: map[FlowID]*Flow{}, Unmatched: m.Unmatched, Duplicates: m.Duplicates, Truncated: m.Truncated}
	type acc struct {
		sum, sq  float64
		shift    float64
		hasShift bool
	}
	accs := map[FlowID]*acc{}
	for id, s := range m.sent {
		if s.dup {
			continue
		}
		fid := FlowID{interval.ID(s.send, t), id.key}
		f := res.Flows[fid]
		if f == nil {
			f = &Flow{Interval: fid.Interval, Key: id.key, MeanNS: math.NaN(), StddevNS: math.NaN()}
			res.Flows[fid] = f
			accs[fid] = &acc{}
		}
		f.Sent++
		res.Packets++
		if !s.got {
			continue
		}
		a := accs[fid]
		d := float64(s.recv - s.send)
		if !a.hasShift {
			a.shift, a.hasShift = d, true // shifted sums keep the variance exact
		}
		f.Received++
		a.sum += d - a.shift
		a.sq += (d - a.shift) * (d - a.shift)
	}
	for fid, f := range res.Flows {
		if f.Received == 0 {
			continue
		}
		a := accs[fid]
		mean := a.sum / float64(f.Received)
		f.MeanNS = a.shift + mean
		f.StddevNS = math.Sqrt(math.Max(0, a.sq/float64(f.Received)-mean*mean))
	}
	return res, nil
}

// Sorted returns the flows ordered by interval, then key text.
func (r *Result) Sorted() []*Flow {
	out := make([]*Flow, 0, len(r.Flows))
	for _, f := range r.Flows {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Interval != out[j].Interval {
			return out[i].Interval < out[j].Interval
		}
		return out[i].Key.String() < out[j].Key.String()
	})
	return out
}

// Truth converts the join into ground-truth records (the format of
// `ldsctl gen --truth`), sorted, so `ldsctl eval` can score real captures.
func (r *Result) Truth(t int64) []truth.Record {
	flows := r.Sorted()
	total := map[capture.FlowKey]int64{}
	for _, f := range flows {
		total[f.Key] += int64(f.Sent)
	}
	out := make([]truth.Record, len(flows))
	for i, f := range flows {
		out[i] = truth.Record{Interval: f.Interval, StartNS: f.Interval * t,
			Sent: int64(f.Sent), Received: int64(f.Received), Lost: int64(f.Lost()),
			DelayNS: results.Float(f.MeanNS), StddevNS: results.Float(f.StddevNS), FlowPkts: total[f.Key]}
		out[i].SetKey(f.Key)
	}
	return out
}
