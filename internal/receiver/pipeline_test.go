package receiver

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
)

// Intervals estimated concurrently are published in the order they became
// final, never more than conc estimate at once, and close returns only
// once everything added is published.
func TestEstPipelineOrder(t *testing.T) {
	for _, conc := range []int{0, 1, 2, 4} {
		rng := rand.New(rand.NewPCG(uint64(conc), 9))
		const n = 200
		sleep := make([]time.Duration, n) // drawn here: the estimations run concurrently
		for i := range sleep {
			sleep[i] = time.Duration(rng.IntN(300)) * time.Microsecond
		}
		var running, peak, peakShare atomic.Int32
		var got []int64
		pl := newEstPipeline(conc, func(j *estJob) (*results.Interval, error) {
			// j.running is what the job shares the cores with (the
			// receiver divides decode's workers by it).
			if j.running < 1 || j.running > max(1, conc) {
				t.Errorf("conc %d: interval %d started with %d estimations running", conc, j.mt.ID, j.running)
			}
			for {
				p := peakShare.Load()
				if int32(j.running) <= p || peakShare.CompareAndSwap(p, int32(j.running)) {
					break
				}
			}
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			defer running.Add(-1)
			time.Sleep(sleep[j.mt.ID])
			if j.mt.ID%7 == 3 {
				return nil, errors.New("bad sketch")
			}
			return &results.Interval{Interval: j.mt.ID}, nil
		}, func(j *estJob) {
			if (j.err != nil) != (j.mt.ID%7 == 3) || j.err == nil && j.iv.Interval != j.mt.ID {
				t.Errorf("conc %d: interval %d published with %v / %v", conc, j.mt.ID, j.iv, j.err)
			}
			got = append(got, j.mt.ID)
		})
		for id := int64(0); id < n; id++ {
			pl.add(&estJob{mt: &interval.Matched{ID: id}})
		}
		pl.close()
		if len(got) != n {
			t.Fatalf("conc %d: %d of %d intervals published at close", conc, len(got), n)
		}
		for i, id := range got {
			if id != int64(i) {
				t.Fatalf("conc %d: publication %d is interval %d (order lost)", conc, i, id)
			}
		}
		if want := int32(max(1, conc)); peak.Load() > want {
			t.Errorf("conc %d: %d estimations ran at once", conc, peak.Load())
		}
		if conc >= 2 && (peak.Load() < 2 || peakShare.Load() < 2) {
			t.Errorf("conc %d: estimations never overlapped (peak %d) or never knew it (%d)", conc, peak.Load(), peakShare.Load())
		}
	}
}
