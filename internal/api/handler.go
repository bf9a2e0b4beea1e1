package api

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// MaxConcurrent answers are computed at once (each selects up to
	// MaxLimit flows); one more request gets 503 with Retry-After. The
	// slot is released before the answer is written: a client that does
	// not read cannot hold it.
	MaxConcurrent = 4
	// MaxWriting large answers (more than SmallAnswer records) are
	// written at once, each holding its selection (at most MaxLimit
	// record pointers) until written; one more gets 503. Smaller answers
	// are written beside them, at most MaxWritingSmall at once: clients
	// that do not read large answers never hold up small ones.
	MaxWriting      = 64
	SmallAnswer     = DefaultLimit
	MaxWritingSmall = 1024
	// WriteIdle is the per-request write deadline: an answer whose client
	// has taken nothing for this long is abandoned (each write that
	// progresses sets it anew, so a slow link still gets a large answer).
	WriteIdle = 10 * time.Second
)

// answer is one computed answer: the records it holds, and how its JSON
// body is written.
type answer struct {
	records int
	write   func(w io.Writer) error
}

// endpoint is one API path: the parameters it takes, and how its answer
// is computed from them.
type endpoint struct {
	params  []string
	compute func(q url.Values) (answer, *paramError)
}

// endpoints are the API's paths.
func (s *Store) endpoints() map[string]endpoint {
	return map[string]endpoint{
		"/api/v1/flows":     {[]string{"interval", "sender", "prefix", "min_packets", "sort", "limit"}, s.flows},
		"/api/v1/links":     {[]string{"interval", "sender"}, s.links},
		"/api/v1/intervals": {[]string{"sender"}, s.intervals},
		"/api/v1/lost":      {[]string{"interval", "sender", "prefix", "min_packets", "kind", "limit"}, s.lost},
	}
}

// Handler serves the API:
//
//	GET /api/v1/flows?interval=latest|<id>&sender=&prefix=<cidr>&min_packets=&sort=packets|delay|loss&limit=
//	GET /api/v1/links?interval=latest|<id>&sender=
//	GET /api/v1/intervals?sender=
//	GET /api/v1/lost?interval=latest|<id>&sender=&prefix=<cidr>&min_packets=&kind=lost|extra&limit= (lost.go)
//
// The query is parsed strictly (ParseQuery): a bad escape, a semicolon,
// an unknown, repeated or empty parameter, or more parameters than the
// endpoint takes get 400 with {"error": ..., "parameter": ...}. More than
// MaxConcurrent answers being computed, or MaxWriting large (or
// MaxWritingSmall small) ones being written, get 503 with Retry-After. Answers are streamed under a per-request write
// deadline (WriteIdle).
func (s *Store) Handler() http.Handler {
	eps := s.endpoints()
	paths := make([]string, 0, len(eps))
	for p := range eps {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	compute := make(chan struct{}, MaxConcurrent)
	writing := make(chan struct{}, MaxWriting)
	writingSmall := make(chan struct{}, MaxWritingSmall)
	busy := func(w http.ResponseWriter, what string) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "", what+"; retry in a second")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep, ok := eps[r.URL.Path]
		switch {
		case !ok:
			writeError(w, http.StatusNotFound, "", fmt.Sprintf("no such endpoint %s %s; try GET %s", r.Method, r.URL.Path, strings.Join(paths, ", ")))
			return
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "", r.Method+" is not allowed here; use GET")
			return
		}
		q, qe := ParseQuery(r.URL.RawQuery, ep.params...)
		if qe != nil {
			writeParamError(w, paramErrorOf(qe))
			return
		}
		select {
		case compute <- struct{}{}:
		default:
			busy(w, fmt.Sprintf("%d answers are being computed already", MaxConcurrent))
			return
		}
		ans, e := ep.compute(q)
		<-compute
		if e != nil {
			writeParamError(w, e)
			return
		}
		pool, limit := writingSmall, MaxWritingSmall
		if ans.records > SmallAnswer {
			pool, limit = writing, MaxWriting
		}
		select {
		case pool <- struct{}{}:
			defer func() { <-pool }()
		default:
			busy(w, fmt.Sprintf("%d answers of this size are being written already", limit))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodHead {
			return
		}
		s.writing.Add(1)
		defer s.writing.Add(-1)
		bw := bufio.NewWriterSize(&deadlineWriter{w: w, rc: http.NewResponseController(w), idle: s.writeIdle}, 32<<10)
		if err := ans.write(bw); err != nil {
			if errors.Is(err, errEncode) {
				// The client sees a broken connection, never a
				// well-formed but truncated answer.
				panic(http.ErrAbortHandler)
			}
			return // the client went away or stopped reading
		}
		_ = bw.Flush()
	})
}

// deadlineWriter sets the response's write deadline idle (WriteIdle)
// ahead of every write (where the ResponseWriter supports deadlines).
type deadlineWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.idle))
	return d.w.Write(p)
}

// errEncode marks a record that cannot be encoded (the answer is aborted).
var errEncode = errors.New("encoding the answer")

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

// jsonAnswer encodes v whole when computed, so that an encoding failure
// is a clean 500 instead of a truncated 200.
func jsonAnswer(v any, records int) (answer, *paramError) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return answer{}, &paramError{status: http.StatusInternalServerError, msg: "encoding the answer: " + err.Error()}
	}
	return answer{records: records, write: func(w io.Writer) error {
		_, err := w.Write(buf.Bytes())
		return err
	}}, nil
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

func (s *Store) flows(q url.Values) (answer, *paramError) {
	prefix, e := parsePrefix(q.Get("prefix"))
	if e != nil {
		return answer{}, e
	}
	minPackets, e := parseMinPackets(q.Get("min_packets"))
	if e != nil {
		return answer{}, e
	}
	sortBy := cmp.Or(q.Get("sort"), "packets")
	less, ok := flowOrders()[sortBy]
	if !ok {
		return answer{}, badParam("sort", "%q: sort by packets, delay or loss", sortBy)
	}
	limit, e := parseLimit(q.Get("limit"))
	if e != nil {
		return answer{}, e
	}
	ivs, e := s.pickIntervals(q)
	if e != nil {
		return answer{}, e
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
	head, err := json.Marshal(struct {
		Intervals []IntervalRef `json:"intervals"`
		Total     int           `json:"total"`
	}{refs, total})
	if err != nil {
		return answer{}, &paramError{status: http.StatusInternalServerError, msg: "encoding the answer: " + err.Error()}
	}
	return answer{records: len(top), write: func(w io.Writer) error { return streamFlows(w, head, top) }}, nil
}

// streamFlows writes a FlowsAnswer (head: its intervals and total) record
// by record as it encodes them, never the whole answer in memory. A record
// that cannot be encoded ends it with errEncode.
func streamFlows(w io.Writer, head []byte, flows []*results.FlowRecord) error {
	if _, err := w.Write(head[:len(head)-1]); err != nil { // without the closing brace
		return err
	}
	if _, err := io.WriteString(w, `,"flows":[`); err != nil {
		return err
	}
	var rec []byte
	for i, f := range flows {
		var err error
		if rec, err = results.MarshalLine(rec[:0], f); err != nil {
			return fmt.Errorf("%w: %w", errEncode, err)
		}
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
			// Withheld loss (null) sorts after every known one.
			if c := desc(orNeg(a.Loss), orNeg(b.Loss)); c != 0 {
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

func (s *Store) links(q url.Values) (answer, *paramError) {
	ivs, e := s.pickIntervals(q)
	if e != nil {
		return answer{}, e
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
	return jsonAnswer(ans, len(ans.Links))
}

// IntervalSummary is one entry of /api/v1/intervals.
type IntervalSummary struct {
	Sender   string          `json:"sender"`
	Interval int64           `json:"interval"`
	StartNS  int64           `json:"start_ns"`
	Outcome  results.Outcome `json:"outcome"`
	Flows    int             `json:"flows"`
	Links    int             `json:"links"`
	// UsableCellRatio is null where no cell was used at either end (an
	// idle interval): a ratio without a denominator.
	UsableCellRatio *float64 `json:"usable_cell_ratio"`
	SenderDrops     uint64   `json:"sender_drops"`
	ReceiverDrops   uint64   `json:"receiver_drops"`
	SketchBytes     uint64   `json:"sketch_bytes"`
	// CaptureDrops: the drops at each end that may have removed packets
	// of this interval; its records withhold their loss (status
	// capture_drops). Absent where neither end dropped any.
	CaptureDrops *results.CaptureDrops `json:"capture_drops,omitempty"`
	// DelayBeyondWindow: packets slower than the hold window moved to a
	// neighbouring interval, so loss is withheld (docs/operations.md, "Flow status").
	DelayBeyondWindow bool `json:"delay_beyond_window,omitempty"`
	// LostList: whether the interval's lost-packet list is complete (and
	// its flows' loss exact); absent without lost-packet tables.
	LostList *results.LostSummary `json:"lost_list,omitempty"`
}

// IntervalsAnswer is the body of /api/v1/intervals: newest first per sender.
type IntervalsAnswer struct {
	Intervals []IntervalSummary `json:"intervals"`
}

func (s *Store) intervals(q url.Values) (answer, *paramError) {
	sender := q.Get("sender")
	snap := s.snapshot(sender)
	if sender != "" && len(snap) == 0 {
		return answer{}, &paramError{status: http.StatusNotFound, param: "sender", msg: fmt.Sprintf("no intervals stored for sender %q", sender)}
	}
	ans := IntervalsAnswer{Intervals: []IntervalSummary{}}
	for _, list := range snap {
		for _, iv := range list {
			ans.Intervals = append(ans.Intervals, IntervalSummary{
				Sender: iv.Sender, Interval: iv.Interval, StartNS: iv.StartNS, Outcome: iv.Outcome,
				Flows: len(iv.Flows), Links: len(iv.Links), UsableCellRatio: results.Float(iv.UsableCellRatio),
				SenderDrops: iv.SenderDrops, ReceiverDrops: iv.ReceiverDrops, SketchBytes: iv.SketchBytes,
				CaptureDrops:      iv.CaptureDrops,
				DelayBeyondWindow: iv.BeyondWindow,
				LostList:          iv.LostList,
			})
		}
	}
	slices.SortFunc(ans.Intervals, func(a, b IntervalSummary) int {
		return cmp.Or(cmp.Compare(a.Sender, b.Sender), cmp.Compare(b.Interval, a.Interval))
	})
	return jsonAnswer(ans, len(ans.Intervals))
}

// orNeg is *v, or -1 for nil (withheld): below every loss.
func orNeg(v *float64) float64 {
	if v == nil {
		return -1
	}
	return *v
}
