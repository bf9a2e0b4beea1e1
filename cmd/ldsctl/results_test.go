package main

import (
	"bytes"
	"context"
	"math"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/api"
	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

// TestReceiverURL: --receiver takes metrics.listen's forms and URLs; the
// rest is refused with what to give instead.
func TestReceiverURL(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{":9465", "http://127.0.0.1:9465", ""},
		{"receiver.example.net:9465", "http://receiver.example.net:9465", ""},
		{"[::1]:9465", "http://[::1]:9465", ""},
		{"http://127.0.0.1:9465", "http://127.0.0.1:9465", ""},
		{"https://r.example.net:9465/", "https://r.example.net:9465", ""},
		{"receiver", "", "not host:port"},
		{":http", "", "is not a number"},
		{"ftp://r:21", "", "scheme ftp"},
	} {
		got, err := receiverURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "host:port or :port") {
				t.Errorf("%q: %q, %v; want an error saying %q and what to give", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestResultsLost: `ldsctl results --lost` prints a receiver's list from
// /api/v1/lost: whether the interval's list is complete, then a row a packet.
func TestResultsLost(t *testing.T) {
	k, err := capture.FlowKeyFromAddrs(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.0.2.7"), 6, 51000, 443)
	if err != nil {
		t.Fatal(err)
	}
	s := api.NewBoundedStore(4, math.MaxInt)
	s.Add(&results.Interval{Sender: "edge-a", Interval: 1763000000, Outcome: results.OutcomeMatched,
		Flows:    []results.FlowRecord{{Interval: 1763000000, Key: k, Packets: 100, Loss: results.Float(1), LossExact: true}},
		LostList: &results.LostSummary{Complete: true, Lost: 1},
		Lost:     []results.LostPacket{{Interval: 1763000000, Sender: "edge-a", Key: k, IDKind: capture.IDTCPSeq, ID: 48213}}})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	var out bytes.Buffer
	if err := printLost(context.Background(), &out, srv.URL, url.Values{"interval": {"latest"}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"interval 1763000000: complete list, 1 lost, 0 extra: loss is exact", "lost", "10.0.0.1:51000", "192.0.2.7:443", "48213"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := printLost(context.Background(), &out, srv.URL, url.Values{"kind": {"late"}}); err == nil || !strings.Contains(err.Error(), "kind") {
		t.Errorf("a bad filter: %v", err)
	}
}
