package api

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

// LostAnswer is the head of /api/v1/lost; "lost" follows, one lost-packet
// record (the lines of receiver.lost_file) per listed packet.
type LostAnswer struct {
	Intervals []LostIntervalRef `json:"intervals"`
	Total     int               `json:"total"` // packets matching the filters, before limit
}

// LostIntervalRef names an interval and says whether its list is complete.
type LostIntervalRef struct {
	IntervalRef
	List *results.LostSummary `json:"lost_list"` // null: no lost-packet tables (lost.capacity 0)
}

// lost answers GET /api/v1/lost?interval=latest|<id>&sender=&prefix=&min_packets=&kind=lost|extra&limit=:
// the lost-packet list of the chosen intervals, with the filters of
// /api/v1/flows (min_packets on the packet's flow record), in the list's
// order (flow, then identifier). The query has been parsed strictly
// (ParseQuery) by the handler; the answer is streamed like /api/v1/flows.
func (s *Store) lost(q url.Values) (answer, *paramError) {
	prefix, e := parsePrefix(q.Get("prefix"))
	if e != nil {
		return answer{}, e
	}
	minPackets, e := parseMinPackets(q.Get("min_packets"))
	if e != nil {
		return answer{}, e
	}
	kind := q.Get("kind")
	if kind != "" && kind != "lost" && kind != results.LostKindExtra {
		return answer{}, badParam("kind", "%q: give lost or extra (or leave it out for both)", kind)
	}
	limit, e := parseLimit(q.Get("limit"))
	if e != nil {
		return answer{}, e
	}
	ivs, e := s.pickIntervals(q)
	if e != nil {
		return answer{}, e
	}
	head := LostAnswer{Intervals: []LostIntervalRef{}}
	var out []*results.LostPacket
	for _, iv := range ivs {
		head.Intervals = append(head.Intervals, LostIntervalRef{IntervalRef{iv.Sender, iv.Interval}, iv.LostList})
		var packets map[capture.FlowKey]float64
		if minPackets > 0 {
			packets = make(map[capture.FlowKey]float64, len(iv.Flows))
			for i := range iv.Flows {
				packets[iv.Flows[i].Key] = iv.Flows[i].Packets
			}
		}
		for i := range iv.Lost {
			p := &iv.Lost[i]
			if kind != "" && p.Extra != (kind == results.LostKindExtra) {
				continue
			}
			if prefix.IsValid() && !prefix.Contains(p.Key.SrcAddr()) && !prefix.Contains(p.Key.DstAddr()) {
				continue
			}
			if packets != nil && packets[p.Key] < minPackets {
				continue
			}
			head.Total++
			if len(out) < limit {
				out = append(out, p)
			}
		}
	}
	b, err := json.Marshal(head)
	if err != nil {
		return answer{}, &paramError{status: http.StatusInternalServerError, msg: "encoding the answer: " + err.Error()}
	}
	return answer{records: len(out), write: func(w io.Writer) error { return streamLost(w, b, out) }}, nil
}

// streamLost writes a LostAnswer (head: its intervals and total) and its
// packets record by record, never the whole answer in memory.
func streamLost(w io.Writer, head []byte, lost []*results.LostPacket) error {
	if _, err := w.Write(head[:len(head)-1]); err != nil { // without the closing brace
		return err
	}
	if _, err := io.WriteString(w, `,"lost":[`); err != nil {
		return err
	}
	var rec []byte
	for i, p := range lost {
		rec = results.MarshalLostLine(rec[:0], p)
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return err
			}
		}
		if _, err := w.Write(rec[:len(rec)-1]); err != nil { // without the newline
			return err
		}
	}
	_, err := io.WriteString(w, "]}\n")
	return err
}

// parsePrefix reads prefix= as a CIDR prefix or one address; the zero
// prefix when empty.
func parsePrefix(p string) (netip.Prefix, *paramError) {
	if p == "" {
		return netip.Prefix{}, nil
	}
	var prefix netip.Prefix
	var err error
	if strings.Contains(p, "/") {
		prefix, err = netip.ParsePrefix(p)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(p)
		prefix = netip.PrefixFrom(a, a.BitLen())
	}
	if err != nil {
		return netip.Prefix{}, badParam("prefix", "%q is not a CIDR prefix like 10.0.0.0/8 or 2001:db8::/32", p)
	}
	return netip.PrefixFrom(prefix.Addr().Unmap(), prefix.Bits()).Masked(), nil
}

// parseMinPackets reads min_packets= (0 when empty).
func parseMinPackets(v string) (float64, *paramError) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || n < 0 || math.IsNaN(n) {
		return 0, badParam("min_packets", "%q is not a number >= 0", v)
	}
	return n, nil
}

// parseLimit reads limit= (DefaultLimit when empty).
func parseLimit(v string) (int, *paramError) {
	if v == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, badParam("limit", "%q is not an integer in 1..%d", v, MaxLimit)
	}
	return n, nil
}
