package sample

import "testing"

func TestReordering(t *testing.T) {
	for _, c := range []struct {
		name   string
		v      []sendRecv
		n      int
		extent float64
	}{
		{"in order", []sendRecv{{1, 10}, {2, 11}, {3, 12}}, 0, 0},
		{"one late", []sendRecv{{1, 20}, {2, 11}, {3, 12}}, 1, 9},
		{"overtaken twice", []sendRecv{{1, 10}, {2, 30}, {3, 12}, {4, 13}}, 1, 18},
		{"swap pairs", []sendRecv{{1, 11}, {2, 10}, {3, 21}, {4, 20}}, 2, 1},
		{"same send time", []sendRecv{{1, 10}, {1, 12}, {2, 11}}, 1, 1},
		{"empty", nil, 0, 0},
	} {
		n, e, _ := reordering(c.v)
		if n != c.n || e != c.extent {
			t.Errorf("%s: %d reordered, extent %v; want %d, %v", c.name, n, e, c.n, c.extent)
		}
	}
}

func TestReorderingOvertaken(t *testing.T) {
	// Overtaken by 4, 2, 1 and 1 later-sent samples; the last in order.
	v := []sendRecv{{1, 40}, {2, 25}, {3, 20}, {4, 30}, {5, 10}}
	n, _, over := reordering(v)
	if n != 4 || over != [OvertakenBuckets]int32{2, 1, 0, 1} {
		t.Fatalf("%d reordered, overtaken %v", n, over)
	}
	// With every packet a sample the estimate is the count.
	d := FlowDist{Delays: make([]float64, 5), Reordered: n, Overtaken: over, SendSpanNS: 4}
	if got := d.ReorderedEstimate(5, ReorderPool{}); got != 4 {
		t.Fatalf("estimate at q = 1: %v, want 4", got)
	}
}
