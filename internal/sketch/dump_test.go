package sketch

import (
	"fmt"
	"os"
	"testing"
)

func TestDumpDecode(t *testing.T) {
	out := os.Getenv("DUMP_OUT")
	if out == "" {
		t.Skip()
	}
	f, _ := os.Create(out)
	defer f.Close()
	for _, p := range []Params{{Rows: 4, Columns: 17500, VLDA: 5, Sampling: []float64{0.01, 0.1, 0.5, 1}}, {Rows: 4, Columns: 17500, VLDA: 1}, {Rows: 4, Columns: 4000, VLDA: 3, Sampling: []float64{0.1, 0.5, 1, 1}}} {
		snd, rcv, comp := benchDecodeInput(&testing.B{}, p, 150000)
		for _, w := range []int{1, 2} {
			_, res, err := estimateDecode(snd, rcv, comp, DecodeOptions{Workers: w}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res {
				fmt.Fprintf(f, "%x %v %v %v %v %v %v %v\n", e.Flow, e.Delay, e.Stddev, e.CI95, e.Loss, e.Packets, e.Samples, e.Identified)
			}
		}
	}
}
