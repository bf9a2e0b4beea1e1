package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

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
	timeout := fs.Duration("timeout", 5*time.Second, "request deadline")
	_ = fs.Parse(args)
	base, err := receiverURL(*addr)
	if err != nil {
		return err
	}
	q := url.Values{"interval": {*iv}, "sort": {*sortBy}, "limit": {fmt.Sprint(*limit)}}
	if *prefix != "" {
		q.Set("prefix", *prefix)
	}
	if *minPk > 0 {
		q.Set("min_packets", fmt.Sprint(*minPk))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/flows?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("querying %s: %w", base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		var e map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("receiver answered %s: %v", resp.Status, e)
	}
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
