package report

import (
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/results"
)

// TestTableForPeople: the table people read names outcomes in words (no
// Go map syntax) and explains its columns.
func TestTableForPeople(t *testing.T) {
	if got := Outcomes(map[results.Outcome]int{"matched": 5, "no_sender_sketch": 1}); got != "matched 5, no_sender_sketch 1" {
		t.Errorf("Outcomes = %q", got)
	}
	if got := Outcomes(nil); got != "none" {
		t.Errorf("Outcomes(nil) = %q", got)
	}
	var b strings.Builder
	Table(&b, []*results.Interval{{Outcome: results.OutcomeMatched}, {Outcome: results.OutcomeMatched}}, 5)
	out := b.String()
	for _, want := range []string{"intervals by outcome: matched 2\n", "Columns: ", `"-": not estimated`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "map[") {
		t.Errorf("table prints Go map syntax:\n%s", out)
	}
}
