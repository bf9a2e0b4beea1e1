package api

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/heapq"
	"github.com/lds-net/lds/internal/results"
)

// Limits of the limit parameter, and of the requests served at once.
const (
	DefaultLimit = 1000
	// MaxLimit caps limit: an answer holds at most this many flows
	// (~30 MB of JSON), whatever the store holds.
	MaxLimit = 100_000
	// MaxConcurrent requests are answered at once; more get 503 with
	// Retry-After (each holds up to MaxLimit flows while it answers).
	MaxConcurrent = 4
)

// Handler serves the API:
//
//	GET /api/v1/flows?interval=latest|<id>&sender=&prefix=<cidr>&min_packets=&sort=packets|delay|loss&limit=
//	GET /api/v1/links?interval=latest|<id>&sender=
//	GET /api/v1/intervals?sender=
//	GET /api/v1/lost?interval=latest|<id>&sender=&prefix=<cidr>&min_packets=&kind=lost|extra&limit= (lost.go)
//
// Bad parameters get 400 with {"error": ..., "parameter": ...}; more than
// MaxConcurrent requests at once get 503.
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/flows", s.flows)
	mux.HandleFunc("GET /api/v1/links", s.links)
	mux.HandleFunc("GET /api/v1/intervals", s.intervals)
	mux.HandleFunc("GET /api/v1/lost", s.lost)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/flows", "/api/v1/links", "/api/v1/intervals", "/api/v1/lost":
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "", r.Method+" is not allowed here; use GET")
			return
		}
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no such endpoint %s %s; try GET /api/v1/flows, /api/v1/links, /api/v1/intervals or /api/v1/lost", r.Method, r.URL.Path))
	})
	sem := make(chan struct{}, MaxConcurrent)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
			mux.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "", fmt.Sprintf("%d requests are being answered already; retry in a second", MaxConcurrent))
		}
	})
}

// apiError is the body of every error answer.
type apiError struct {
	Error     string `json:"error"`
	Parameter string `json:"parameter,omitempty"`
}

// paramError is a bad query parameter.
type paramError struct {
	status int
	param  string
	msg    string
}

func (e *paramError) Error() string { return e.param + ": " + e.msg }

func badParam(param, format string, a ...any) *paramError {
	return &paramError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, a...)}
}

func writeError(w http.ResponseWriter, status int, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Error: msg, Parameter: param})
}

func writeParamError(w http.ResponseWriter, e *paramError) { writeError(w, e.status, e.param, e.msg) }

// writeJSON encodes v whole before writing, so that an encoding failure is a
// clean 500 instead of a truncated 200.
func writeJSON(w http.ResponseWriter, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		writeError(w, http.StatusInternalServerError, "", "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

// checkParams refuses parameters the endpoint does not know (typos would
// otherwise silently return unfiltered data) and repeated ones.
func checkParams(q url.Values, allowed ...string) *paramError {
	for k, v := range q {
		if !slices.Contains(allowed, k) {
			return badParam(k, "unknown parameter; this endpoint takes %s", strings.Join(allowed, ", "))
		}
		if len(v) > 1 {
			return badParam(k, "given %d times; give it once", len(v))
		}
	}
	return nil
}

// IntervalRef names one stored interval.
type IntervalRef struct {
	Sender   string `json:"sender"`
	Interval int64  `json:"interval"`
}

// pickIntervals resolves interval= and sender= to at most one interval per
// sender, in sender order. latest (the default) is each sender's newest
// interval that carries results.
func (s *Store) pickIntervals(q url.Values) ([]*results.Interval, *paramError) {
	sender := q.Get("sender")
	snap := s.snapshot(sender)
	if sender != "" && len(snap) == 0 {
		return nil, &paramError{status: http.StatusNotFound, param: "sender", msg: fmt.Sprintf("no intervals stored for sender %q", sender)}
	}
	spec := q.Get("interval")
	latest := spec == "" || spec == "latest"
	var id int64
	if !latest {
		var err error
		if id, err = strconv.ParseInt(spec, 10, 64); err != nil {
			return nil, badParam("interval", "%q is neither \"latest\" nor an interval id (an integer)", spec)
		}
	}
	names := make([]string, 0, len(snap))
	for n := range snap {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []*results.Interval
	for _, n := range names {
		list := snap[n]
		for i := len(list) - 1; i >= 0; i-- {
			if (latest && hasRecords(list[i])) || (!latest && list[i].Interval == id) {
				out = append(out, list[i])
				break
			}
		}
	}
	if !latest && len(out) == 0 {
		return nil, &paramError{status: http.StatusNotFound, param: "interval", msg: fmt.Sprintf("interval %d is not stored (see /api/v1/intervals for those kept)", id)}
	}
	return out, nil
}

// FlowsAnswer is the body of /api/v1/flows.
type FlowsAnswer struct {
	Intervals []IntervalRef         `json:"intervals"` // the intervals the flows come from
	Total     int                   `json:"total"`     // flows matching the filters, before limit
	Flows     []*results.FlowRecord `json:"flows"`     // same JSON as a results JSONL line
}

func (s *Store) flows(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := checkParams(q, "interval", "sender", "prefix", "min_packets", "sort", "limit"); e != nil {
		writeParamError(w, e)
		return
	}
	var prefix netip.Prefix
	if p := q.Get("prefix"); p != "" {
		var err error
		if strings.Contains(p, "/") {
			prefix, err = netip.ParsePrefix(p)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(p)
			prefix = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			writeParamError(w, badParam("prefix", "%q is not a CIDR prefix like 10.0.0.0/8 or 2001:db8::/32", p))
			return
		}
		prefix = netip.PrefixFrom(prefix.Addr().Unmap(), prefix.Bits()).Masked()
	}
	minPackets := 0.0
	if v := q.Get("min_packets"); v != "" {
		var err error
		if minPackets, err = strconv.ParseFloat(v, 64); err != nil || minPackets < 0 || math.IsNaN(minPackets) {
			writeParamError(w, badParam("min_packets", "%q is not a number >= 0", v))
			return
		}
	}
	sortBy := cmp.Or(q.Get("sort"), "packets")
	less, ok := flowOrders()[sortBy]
	if !ok {
		writeParamError(w, badParam("sort", "%q: sort by packets, delay or loss", sortBy))
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
	refs := []IntervalRef{}
	// The first limit flows in order, kept in a heap whose top is the
	// last of them: memory follows limit, not the flows stored.
	top := make([]*results.FlowRecord, 0, min(limit, 1024))
	after := func(a, b **results.FlowRecord) bool { return less(*a, *b) > 0 }
	total := 0
	for _, iv := range ivs {
		refs = append(refs, IntervalRef{iv.Sender, iv.Interval})
		for i := range iv.Flows {
			f := &iv.Flows[i]
			if f.Packets < minPackets {
				continue
			}
			if prefix.IsValid() && !prefix.Contains(f.Key.SrcAddr()) && !prefix.Contains(f.Key.DstAddr()) {
				continue
			}
			total++
			switch {
			case len(top) < limit:
				top = heapq.Push(top, f, after)
			case less(f, top[0]) < 0:
				top[0] = f
				heapq.Down(top, 0, after)
			}
		}
	}
	slices.SortFunc(top, less)
	streamFlows(w, refs, total, top)
}

// streamFlows writes a FlowsAnswer record by record as it encodes them,
// never the whole answer in memory. A record that cannot be encoded
// aborts the response (the client sees a broken connection, never a
// well-formed but truncated answer).
func streamFlows(w http.ResponseWriter, refs []IntervalRef, total int, flows []*results.FlowRecord) {
	head, err := json.Marshal(struct {
		Intervals []IntervalRef `json:"intervals"`
		Total     int           `json:"total"`
	}{refs, total})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "", "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.Write(head[:len(head)-1]) // without the closing brace
	bw.WriteString(`,"flows":[`)
	var rec []byte
	for i, f := range flows {
		var err error
		if rec, err = results.MarshalLine(rec[:0], f); err != nil {
			panic(http.ErrAbortHandler)
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(rec[:len(rec)-1]) // without the newline
	}
	bw.WriteString("]}\n")
	_ = bw.Flush()
}

// flowOrders: all descending (the worst or heaviest first); flows without a
// delay estimate sort last by delay; ties by flow key for a stable answer.
func flowOrders() map[string]func(a, b *results.FlowRecord) int {
	byKey := func(a, b *results.FlowRecord) int {
		if c := cmp.Compare(a.Sender, b.Sender); c != 0 {
			return c
		}
		return capture.CompareText(a.Key, b.Key)
	}
	desc := func(a, b float64) int { return cmp.Compare(b, a) }
	return map[string]func(a, b *results.FlowRecord) int{
		"packets": func(a, b *results.FlowRecord) int {
			if c := desc(a.Packets, b.Packets); c != 0 {
				return c
			}
			return byKey(a, b)
		},
		"loss": func(a, b *results.FlowRecord) int {
			if c := desc(a.Loss, b.Loss); c != 0 {
				return c
			}
			return byKey(a, b)
		},
		"delay": func(a, b *results.FlowRecord) int {
			switch {
			case a.DelayNS == nil && b.DelayNS == nil:
				return byKey(a, b)
			case a.DelayNS == nil:
				return 1
			case b.DelayNS == nil:
				return -1
			}
			if c := desc(*a.DelayNS, *b.DelayNS); c != 0 {
				return c
			}
			return byKey(a, b)
		},
	}
}

// LinksAnswer is the body of /api/v1/links.
type LinksAnswer struct {
	Intervals []IntervalRef         `json:"intervals"`
	Links     []*results.LinkRecord `json:"links"`
}

func (s *Store) links(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := checkParams(q, "interval", "sender"); e != nil {
		writeParamError(w, e)
		return
	}
	ivs, e := s.pickIntervals(q)
	if e != nil {
		writeParamError(w, e)
		return
	}
	ans := LinksAnswer{Intervals: []IntervalRef{}, Links: []*results.LinkRecord{}}
	for _, iv := range ivs {
		ans.Intervals = append(ans.Intervals, IntervalRef{iv.Sender, iv.Interval})
		for i := range iv.Links {
			l := iv.Links[i] // copy: fill in the sender without touching the stored record
			if l.Sender == "" {
				l.Sender = iv.Sender
			}
			ans.Links = append(ans.Links, &l)
		}
	}
	writeJSON(w, ans)
}

// IntervalSummary is one entry of /api/v1/intervals.
type IntervalSummary struct {
	Sender          string  `json:"sender"`
	Interval        int64   `json:"interval"`
	StartNS         int64   `json:"start_ns"`
	Outcome         string  `json:"outcome"`
	Flows           int     `json:"flows"`
	Links           int     `json:"links"`
	UsableCellRatio float64 `json:"usable_cell_ratio"`
	SenderDrops     uint64  `json:"sender_drops"`
	ReceiverDrops   uint64  `json:"receiver_drops"`
	SketchBytes     uint64  `json:"sketch_bytes"`
	// LostList: whether the interval's lost-packet list is complete (and
	// its flows' loss exact); absent without lost-packet tables.
	LostList *results.LostSummary `json:"lost_list,omitempty"`
}

// IntervalsAnswer is the body of /api/v1/intervals: newest first per sender.
type IntervalsAnswer struct {
	Intervals []IntervalSummary `json:"intervals"`
}

func (s *Store) intervals(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := checkParams(q, "sender"); e != nil {
		writeParamError(w, e)
		return
	}
	sender := q.Get("sender")
	snap := s.snapshot(sender)
	if sender != "" && len(snap) == 0 {
		writeError(w, http.StatusNotFound, "sender", fmt.Sprintf("no intervals stored for sender %q", sender))
		return
	}
	ans := IntervalsAnswer{Intervals: []IntervalSummary{}}
	for _, list := range snap {
		for _, iv := range list {
			ans.Intervals = append(ans.Intervals, IntervalSummary{
				Sender: iv.Sender, Interval: iv.Interval, StartNS: iv.StartNS, Outcome: iv.Outcome,
				Flows: len(iv.Flows), Links: len(iv.Links), UsableCellRatio: iv.UsableCellRatio,
				SenderDrops: iv.SenderDrops, ReceiverDrops: iv.ReceiverDrops, SketchBytes: iv.SketchBytes, LostList: iv.LostList,
			})
		}
	}
	slices.SortFunc(ans.Intervals, func(a, b IntervalSummary) int {
		return cmp.Or(cmp.Compare(a.Sender, b.Sender), cmp.Compare(b.Interval, a.Interval))
	})
	writeJSON(w, ans)
}
