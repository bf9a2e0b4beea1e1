package api

import (
	"bufio"
	"encoding/json"
	"math"
	"net/http"
	"net/netip"
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

// lost serves GET /api/v1/lost?interval=latest|<id>&sender=&prefix=&min_packets=&kind=lost|extra&limit=:
// the lost-packet list of the chosen intervals, with the filters of
// /api/v1/flows (min_packets on the packet's flow record), in the list's
// order (flow, then identifier).
func (s *Store) lost(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := checkParams(q, "interval", "sender", "prefix", "min_packets", "kind", "limit"); e != nil {
		writeParamError(w, e)
		return
	}
	prefix, e := parsePrefix(q.Get("prefix"))
	if e != nil {
		writeParamError(w, e)
		return
	}
	minPackets := 0.0
	if v := q.Get("min_packets"); v != "" {
		var err error
		if minPackets, err = strconv.ParseFloat(v, 64); err != nil || minPackets < 0 || math.IsNaN(minPackets) {
			writeParamError(w, badParam("min_packets", "%q is not a number >= 0", v))
			return
		}
	}
	kind := q.Get("kind")
	if kind != "" && kind != "lost" && kind != results.LostKindExtra {
		writeParamError(w, badParam("kind", "%q: give lost or extra (or leave it out for both)", kind))
		return
	}
	limit := DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			writeParamError(w, badParam("limit", "%q is not an integer in 1..%d", v, MaxLimit))
			return
		}
		limit = n
	}
	ivs, e := s.pickIntervals(q)
	if e != nil {
		writeParamError(w, e)
		return
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
		writeError(w, http.StatusInternalServerError, "", "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.Write(b[:len(b)-1])
	bw.WriteString(`,"lost":[`)
	var rec []byte
	for i, p := range out {
		rec = results.MarshalLostLine(rec[:0], p)
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(rec[:len(rec)-1])
	}
	bw.WriteString("]}\n")
	_ = bw.Flush()
}

// parsePrefix reads prefix= as /api/v1/flows does: a CIDR prefix or one
// address; the zero prefix when empty.
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
