package api

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

// docStore holds what docs/operations.md's API examples show: sender a,
// interval 1763000000 matched (two flows in 10.0.0.0/24, one with a spike,
// the default LDA class, a complete lost-packet list of three packets, two
// of them in 10.0.0.0/24), 1763000001 voided, and an interval whose delays
// went beyond the hold window.
func docStore() *Store {
	s := NewStore(10)
	lostB := capture.MustParseFlowKey("10.0.0.2", "192.0.2.7", 6, 40100, 443)
	lostC := capture.MustParseFlowKey("198.51.100.4", "192.0.2.9", 17, 5000, 53)
	s.Add(&results.Interval{Sender: "a", Interval: 1763000000, StartNS: 1763000000000000000, Outcome: results.OutcomeMatched,
		Flows: []results.FlowRecord{{Interval: 1763000000, StartNS: 1763000000000000000, Key: capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443),
			DelayNS: f(412345.5), StddevNS: f(80211), Loss: f(0), LossExact: true, Packets: 1520, Samples: 1498, CI95NS: f(4020.1), Spike: true},
			{Interval: 1763000000, StartNS: 1763000000000000000, Key: lostB, Loss: f(2), LossExact: true, Packets: 812},
			{Interval: 1763000000, StartNS: 1763000000000000000, Key: lostC, Loss: f(1), LossExact: true, Packets: 40}},
		Links: []results.LinkRecord{{Interval: 1763000000, StartNS: 1763000000000000000, Class: "default", Sent: 4515, Received: 4499,
			LossRatio: f(16.0 / 4515), DelayNS: f(1e6), StddevNS: f(5e5), Samples: 4000, CI95NS: f(1000)}},
		LostList: &results.LostSummary{Complete: true, Lost: 3},
		Lost: []results.LostPacket{
			{Interval: 1763000000, Sender: "a", Key: lostB, IDKind: capture.IDTCPSeq, ID: 48213},
			{Interval: 1763000000, Sender: "a", Key: lostB, IDKind: capture.IDTCPSeq, ID: 49661},
			{Interval: 1763000000, Sender: "a", Key: lostC, IDKind: capture.IDIPv4, ID: 7},
		}})
	s.Add(&results.Interval{Sender: "a", Interval: 1763000001, StartNS: 1763000001000000000, Outcome: results.OutcomeVoidedGap})
	s.Add(&results.Interval{Sender: "b", Interval: 1763000000, StartNS: 1763000000000000000, Outcome: results.OutcomeMatched, BeyondWindow: true})
	return s
}

// TestDocExamples holds docs/operations.md's API examples to the real
// answers: every field an example shows is one the endpoint answers
// with, every value of "class" is one the code gives, and an example
// error is the error, byte for byte. The "Flow status" table's claim
// about /api/v1/intervals is checked too.
func TestDocExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	h := docStore().Handler()
	lines := strings.Split(string(doc), "\n")
	keyRe := regexp.MustCompile(`"([a-z0-9_]+)":`)
	classRe := regexp.MustCompile(`"class":"([^"]*)"`)
	examples := 0
	for i, l := range lines {
		target, ok := strings.CutPrefix(l, "$ curl -s 'http://receiver:9465")
		if !ok {
			continue
		}
		target = strings.TrimSuffix(target, "'")
		var shown []string
		for _, r := range lines[i+1:] {
			if strings.HasPrefix(r, "$ ") || strings.HasPrefix(r, "```") {
				break
			}
			shown = append(shown, strings.TrimSpace(r))
		}
		example := strings.Join(shown, "")
		examples++
		code, body := do(t, h, http.MethodGet, target)
		if code != http.StatusOK {
			if strings.TrimSpace(string(body)) != example {
				t.Errorf("%s: docs/operations.md shows\n%s\nthe handler answers %d\n%s", target, example, code, body)
			}
			continue
		}
		answered := map[string]bool{}
		for _, m := range keyRe.FindAllStringSubmatch(string(body), -1) {
			answered[m[1]] = true
		}
		for _, m := range keyRe.FindAllStringSubmatch(example, -1) {
			if !answered[m[1]] {
				t.Errorf("%s: docs/operations.md's example has %q, the answer has no such field:\n%s", target, m[1], body)
			}
		}
		var realClasses []string
		for _, m := range classRe.FindAllStringSubmatch(string(body), -1) {
			realClasses = append(realClasses, m[1])
		}
		for _, m := range classRe.FindAllStringSubmatch(example, -1) {
			if !slices.Contains(realClasses, m[1]) {
				t.Errorf("%s: docs/operations.md's example has class %q, the answer's classes are %v", target, m[1], realClasses)
			}
		}
	}
	if examples < 4 {
		t.Fatalf("found %d curl examples in docs/operations.md: the format changed", examples)
	}
	if !strings.Contains(string(doc), "`\"delay_beyond_window\": true` in `/api/v1/intervals`") {
		return
	}
	_, body := do(t, h, http.MethodGet, "/api/v1/intervals?sender=b")
	if !strings.Contains(string(body), `"delay_beyond_window":true`) {
		t.Errorf("docs/operations.md says an interval has \"delay_beyond_window\": true in /api/v1/intervals; the answer is %s", body)
	}
}
