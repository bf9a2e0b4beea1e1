package sketch

import (
	"math"
	"testing"
)

// TestQPaperNumbers: section 3.1's worked example, z = n·P/C = 0.0875.
func TestQPaperNumbers(t *testing.T) {
	if q := Q(4, 0.0875); math.Abs(q-0.9850) > 5e-5 {
		t.Errorf("q(4, 0.0875) = %.5f, paper says 0.9850", q)
	}
	if q := Q(1, 0.0875); math.Abs(q-0.91) > 0.005 {
		t.Errorf("q(1, 0.0875) = %.5f, paper says 0.91", q)
	}
	if r := 1 / (math.E * 0.0875); math.Abs(r-4.20) > 0.005 {
		t.Errorf("optimal R = %.3f, paper says 4.20", r)
	}
	if q := Q(3, 1); q != 0 {
		t.Errorf("overloaded q = %v, want 0", q)
	}
}

func TestSize(t *testing.T) {
	// The paper's trace: ~140k flows, 70,000 counters (n/C = 2), x = 50,
	// Pareto shape 0.8 (P = 50^-0.8 = 0.0437, so z = 0.0875).
	s, err := Size(SizingInput{Flows: 140000, VLDA: 1, ParetoShape: 0.8, ParetoScale: 1, Threshold: 50, Cells: 70000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("budget: %+v", s)
	if math.Abs(s.RowsExact-4.20) > 0.01 || s.Rows != 4 || s.Columns != 17500 || math.Abs(s.Q-0.9850) > 5e-4 {
		t.Errorf("got R %.3f -> %d x %d, Q %.4f; paper: 4.20 -> 4 x 17500, 0.9850", s.RowsExact, s.Rows, s.Columns, s.Q)
	}
	// Target epsilon = 1.5 %: R = -ln 0.015 = 4.20 -> 4, and the columns
	// must bring q to at least 98.5 %.
	s, err = Size(SizingInput{Flows: 140000, Epsilon: 0.015, ParetoShape: 0.8, ParetoScale: 1, Threshold: 50})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("epsilon: %+v", s)
	if s.Rows != 4 || s.Q < 0.985 || Q(4, 140000*s.P/float64(4*(s.Columns-1))) >= 0.985 {
		t.Errorf("epsilon sizing %+v is not the smallest that reaches q >= 0.985", s)
	}
	// With R rounded to 4, q >= 1-ε needs z <= ε^(1/4)/4 = 0.0875: the
	// paper's own 4 x 17,500 (within the ~0.03 % of its rounded numbers).
	if math.Abs(float64(s.Columns)-17500) > 10 {
		t.Errorf("columns %d, the paper's 17,500", s.Columns)
	}
	// Section 3.2: with k = 5 the rows are max(1, -ln ε / k) rounded.
	s, err = Size(SizingInput{Flows: 10000, Epsilon: 0.001, VLDA: 5, ParetoShape: 1, ParetoScale: 1, Threshold: 100})
	if err != nil {
		t.Fatal(err)
	}
	if want := -math.Log(0.001) / 5; math.Abs(s.RowsExact-want) > 1e-12 || s.Rows != 1 || s.Q < 0.999 {
		t.Errorf("k=5: %+v, want RowsExact %.3f, 1 row, Q >= 0.999", s, want)
	}
	for _, bad := range []SizingInput{
		{Flows: 0, Epsilon: 0.01, ParetoShape: 1, ParetoScale: 1, Threshold: 10},
		{Flows: 10, Epsilon: 0.5, ParetoShape: 1, ParetoScale: 1, Threshold: 10},
		{Flows: 10, Epsilon: 0.01, ParetoShape: 0, ParetoScale: 1, Threshold: 10},
		{Flows: 10, Epsilon: 0.01, ParetoShape: 1, ParetoScale: 1, Threshold: -1},
	} {
		if _, err := Size(bad); err == nil {
			t.Errorf("Size(%+v) accepted bad input", bad)
		}
	}
}
