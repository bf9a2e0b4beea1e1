package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lds-net/lds/internal/api"
	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/report"
	"github.com/lds-net/lds/internal/results"
)

func cmdResults(args []string) error {
	fs := flag.NewFlagSet("ldsctl results", flag.ExitOnError)
	addr := fs.String("receiver", "http://127.0.0.1:9465", "receiver's HTTP address: its metrics.listen as host:port or :port, or a http:// or https:// URL")
	iv := fs.String("interval", "latest", "interval id or latest")
	prefix := fs.String("prefix", "", "only flows with src or dst in this prefix")
	minPk := fs.Int("min-packets", 0, "only flows with at least this many packets")
	sortBy := fs.String("sort", "packets", "sort by delay, loss or packets")
	limit := fs.Int("limit", 20, "rows to print")
	lost := fs.Bool("lost", false, "print the interval's lost packets (GET /api/v1/lost) instead of its flows")
	timeout := fs.Duration("timeout", 5*time.Second, "request deadline")
	_ = fs.Parse(args)
	base, err := receiverURL(*addr)
	if err != nil {
		return err
	}
	q := url.Values{"interval": {*iv}, "limit": {fmt.Sprint(*limit)}}
	if *prefix != "" {
		q.Set("prefix", *prefix)
	}
	if *minPk > 0 {
		q.Set("min_packets", fmt.Sprint(*minPk))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *lost {
		return printLost(ctx, os.Stdout, base, q)
	}
	q.Set("sort", *sortBy)
	resp, err := get(ctx, base, "/api/v1/flows?"+q.Encode())
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Flows []results.FlowRecord `json:"flows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("decoding the receiver's answer: %w", err)
	}
	report.FlowTable(os.Stdout, body.Flows, *limit)
	return nil
}

// receiverURL turns --receiver into the base URL of the results API: a
// URL with scheme http or https as given, host:port as http://host:port,
// and :port (metrics.listen's form) as http://127.0.0.1:port.
func receiverURL(s string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("--receiver %q: %s; give the receiver's metrics.listen as host:port or :port, or a URL such as http://receiver.example.net:9465", s, why)
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return "", bad(err.Error())
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", bad("scheme " + u.Scheme + " is not http or https")
		}
		if u.Host == "" {
			return "", bad("no host")
		}
		return strings.TrimSuffix(s, "/"), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", bad("not host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", bad("port " + port + " is not a number in 1..65535")
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// get queries the receiver's API; an answer other than 200 is an error
// carrying the API's message.
func get(ctx context.Context, addr, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("querying %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }()
		var e map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return nil, fmt.Errorf("receiver answered %s: %v", resp.Status, e)
	}
	return resp, nil
}

// printLost prints the lost-packet list of the chosen interval(s) as a
// table, with a line per interval saying whether its list is complete.
func printLost(ctx context.Context, out io.Writer, addr string, q url.Values) error {
	resp, err := get(ctx, addr, "/api/v1/lost?"+q.Encode())
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		api.LostAnswer
		Lost []results.LostPacket `json:"lost"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("decoding the receiver's answer: %w", err)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, iv := range body.Intervals {
		switch l := iv.List; {
		case l == nil:
			fmt.Fprintf(w, "# sender %s interval %d: no lost-packet list (lost.capacity is 0)\n", iv.Sender, iv.Interval)
		case l.Complete:
			fmt.Fprintf(w, "# sender %s interval %d: complete list, %d lost, %d extra: loss is exact\n", iv.Sender, iv.Interval, l.Lost, l.Extra)
		default:
			fmt.Fprintf(w, "# sender %s interval %d: INCOMPLETE list (%s), %d lost and %d extra listed: loss is an estimate\n", iv.Sender, iv.Interval, l.Reason, l.Lost, l.Extra)
		}
	}
	fmt.Fprintf(w, "kind\tproto\tsrc\tdst\tid\tsent_ns\n")
	for _, p := range body.Lost {
		kind := "lost"
		if p.Extra {
			kind = results.LostKindExtra
		}
		id, sent := "-", "-"
		if p.IDKind != capture.IDNone {
			id = fmt.Sprint(p.ID)
		}
		if p.SentNS != nil {
			sent = fmt.Sprint(*p.SentNS)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", kind, p.Key.Proto,
			netip.AddrPortFrom(p.Key.SrcAddr(), p.Key.SPort), netip.AddrPortFrom(p.Key.DstAddr(), p.Key.DPort), id, sent)
	}
	if body.Total > len(body.Lost) {
		fmt.Fprintf(w, "# %d more (raise --limit)\n", body.Total-len(body.Lost))
	}
	return w.Flush()
}
