package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/lds-net/lds/internal/report"
	"github.com/lds-net/lds/internal/results"
)

func cmdResults(args []string) error {
	fs := flag.NewFlagSet("ldsctl results", flag.ExitOnError)
	addr := fs.String("receiver", "http://127.0.0.1:9465", "receiver's HTTP address (metrics.listen)")
	iv := fs.String("interval", "latest", "interval id or latest")
	prefix := fs.String("prefix", "", "only flows with src or dst in this prefix")
	minPk := fs.Int("min-packets", 0, "only flows with at least this many packets")
	sortBy := fs.String("sort", "packets", "sort by delay, loss or packets")
	limit := fs.Int("limit", 20, "rows to print")
	timeout := fs.Duration("timeout", 5*time.Second, "request deadline")
	_ = fs.Parse(args)
	q := url.Values{"interval": {*iv}, "sort": {*sortBy}, "limit": {fmt.Sprint(*limit)}}
	if *prefix != "" {
		q.Set("prefix", *prefix)
	}
	if *minPk > 0 {
		q.Set("min_packets", fmt.Sprint(*minPk))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *addr+"/api/v1/flows?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("querying %s: %w", *addr, err)
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
