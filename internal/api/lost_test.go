package api

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

func lostKey(t *testing.T, src, dst string, sport uint16) capture.FlowKey {
	t.Helper()
	k, err := capture.FlowKeyFromAddrs(netip.MustParseAddr(src), netip.MustParseAddr(dst), 6, sport, 443)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestLostEndpoint: /api/v1/lost serves the stored lists with the filters
// of /api/v1/flows and kind, and refuses what it does not know.
func TestLostEndpoint(t *testing.T) {
	a, b := lostKey(t, "10.0.0.1", "192.0.2.7", 51000), lostKey(t, "10.9.0.1", "192.0.2.8", 51001)
	sent := int64(1763000000079026776)
	iv := &results.Interval{Sender: "edge-a", Interval: 1763000000, Outcome: results.OutcomeMatched,
		Flows:    []results.FlowRecord{{Interval: 1763000000, Key: a, Packets: 500, Loss: results.Float(2), LossExact: true}, {Interval: 1763000000, Key: b, Packets: 50, Loss: results.Float(1), LossExact: true}},
		LostList: &results.LostSummary{Complete: true, Lost: 3, Extra: 1},
		Lost: []results.LostPacket{
			{Interval: 1763000000, Sender: "edge-a", Key: a, IDKind: capture.IDTCPSeq, ID: 48213, SentNS: &sent},
			{Interval: 1763000000, Sender: "edge-a", Key: a, IDKind: capture.IDTCPSeq, ID: 48999},
			{Interval: 1763000000, Sender: "edge-a", Key: b, IDKind: capture.IDIPv4, ID: 7},
			{Interval: 1763000000, Sender: "edge-a", Key: b, Extra: true},
		}}
	s := NewStore(4)
	s.Add(iv)
	h := s.Handler()
	for _, c := range []struct {
		query string
		total int
		first string
	}{
		{"", 4, `{"interval":1763000000,"sender":"edge-a","src":"10.0.0.1","dst":"192.0.2.7","sport":51000,"dport":443,"proto":6,"sent_ns":1763000000079026776,"id":48213,"id_kind":"tcp_seq"}`},
		{"?prefix=10.9.0.0/16", 2, `{"interval":1763000000,"sender":"edge-a","src":"10.9.0.1","dst":"192.0.2.8","sport":51001,"dport":443,"proto":6,"sent_ns":null,"id":7,"id_kind":"ipv4_id"}`},
		{"?kind=extra", 1, `{"interval":1763000000,"sender":"edge-a","src":"10.9.0.1","dst":"192.0.2.8","sport":51001,"dport":443,"proto":6,"sent_ns":null,"id":null,"kind":"extra"}`},
		{"?min_packets=100&limit=1", 2, `{"interval":1763000000,"sender":"edge-a","src":"10.0.0.1","dst":"192.0.2.7","sport":51000,"dport":443,"proto":6,"sent_ns":1763000000079026776,"id":48213,"id_kind":"tcp_seq"}`},
	} {
		code, body := do(t, h, http.MethodGet, "/api/v1/lost"+c.query)
		if code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", c.query, code, body)
		}
		var ans struct {
			LostAnswer
			Lost []json.RawMessage `json:"lost"`
		}
		if err := json.Unmarshal(body, &ans); err != nil {
			t.Fatalf("%s: %v: %s", c.query, err, body)
		}
		if ans.Total != c.total || len(ans.Lost) == 0 || string(ans.Lost[0]) != c.first {
			t.Errorf("%s: total %d, first %s; want %d, %s", c.query, ans.Total, ans.Lost, c.total, c.first)
		}
		if len(ans.Intervals) != 1 || ans.Intervals[0].List == nil || !ans.Intervals[0].List.Complete {
			t.Errorf("%s: intervals %+v", c.query, ans.Intervals)
		}
		var p results.LostPacket
		if err := json.Unmarshal(ans.Lost[0], &p); err != nil {
			t.Errorf("%s: the record does not read back: %v", c.query, err)
		}
	}
	for _, bad := range []string{"?kind=late", "?prefix=nope", "?limit=0", "?sort=loss", "?interval=5"} {
		if code, _ := do(t, h, http.MethodGet, "/api/v1/lost"+bad); code/100 != 4 {
			t.Errorf("%s: status %d, want 4xx", bad, code)
		}
	}
}
