package main

import (
	"flag"
	"fmt"

	"github.com/lds-net/lds/internal/sketch"
)

func cmdSize(args []string) error {
	fs := flag.NewFlagSet("ldsctl size", flag.ExitOnError)
	flows := fs.Int("flows", 146000, "expected flows per interval")
	eps := fs.Float64("epsilon", 0.015, "target probability that a large flow has no small-collision cell (1 - q)")
	k := fs.Int("vlda", 1, "vLDA length k")
	shape := fs.Float64("pareto-shape", 0.75, "Pareto shape of flow sizes in packets")
	scale := fs.Float64("pareto-scale", 1, "Pareto scale of flow sizes in packets")
	x := fs.Float64("threshold", 1000, "a flow is large above this many packets")
	cells := fs.Int("cells", 0, "memory budget in cells (all rows); 0 = size from --epsilon")
	_ = fs.Parse(args)
	s, err := sketch.Size(sketch.SizingInput{Flows: *flows, Epsilon: *eps, VLDA: *k, ParetoShape: *shape,
		ParetoScale: *scale, Threshold: *x, Cells: *cells})
	if err != nil {
		return err
	}
	fmt.Printf("rows: %d (exact %.2f)\ncolumns: %d\ncells: %d\nmemory per sketch: %d bytes\n", s.Rows, s.RowsExact, s.Columns, s.Cells, s.Bytes)
	fmt.Printf("P(flow > %.0f packets) = %.4g, load z = %.4g, q = %.4f\n", *x, s.P, s.Z, s.Q)
	fmt.Printf("\nsketch:\n  rows: %d\n  columns: %d\n  vlda: %d\n", s.Rows, s.Columns, *k)
	return nil
}
