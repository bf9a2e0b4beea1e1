package receiver

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/results"
)

// Intervals estimated by the worker pool are emitted in the order they
// were submitted, never more than the pool's size estimate at once, the
// first ones do run side by side (and know it), and the emitter ends only
// once everything submitted is emitted.
func TestEstStageOrder(t *testing.T) {
	for _, conc := range []int{0, 1, 2, 4} {
		rng := rand.New(rand.NewPCG(uint64(conc), 9))
		const n = 200
		sleep := make([]time.Duration, n) // drawn here: the estimations run concurrently
		for i := range sleep {
			sleep[i] = time.Duration(rng.IntN(300)) * time.Microsecond
		}
		size := max(1, conc)
		// The first size jobs wait for each other: a pool of that size
		// runs them all at once, a smaller one never does.
		var barrier sync.WaitGroup
		barrier.Add(size)
		met := make(chan struct{})
		go func() { barrier.Wait(); close(met) }()
		var running, peak, peakShare atomic.Int32
		est := newEstStage(conc, func(j *estJob) (*results.Interval, error) {
			// j.running is what the job shares the cores with (the
			// receiver divides decode's workers by it).
			if j.running < 1 || j.running > size {
				t.Errorf("conc %d: interval %d started with %d estimations running", conc, j.mt.ID, j.running)
			}
			raise(&peakShare, int32(j.running))
			raise(&peak, running.Add(1))
			defer running.Add(-1)
			if j.mt.ID < int64(size) {
				barrier.Done()
				select {
				case <-met:
				case <-time.After(time.Minute):
					t.Errorf("conc %d: the first %d intervals never estimated at once", conc, size)
				}
			}
			time.Sleep(sleep[j.mt.ID])
			if j.mt.ID%7 == 3 {
				return nil, errors.New("bad sketch")
			}
			return &results.Interval{Interval: j.mt.ID}, nil
		})
		if est.workers != size {
			t.Fatalf("conc %d: %d workers", conc, est.workers)
		}
		var got []int64
		emitted := make(chan struct{})
		for range est.workers {
			go est.runWorker()
		}
		go func() {
			defer close(emitted)
			est.runEmitter(func(j *estJob) {
				if !j.tick && ((j.err != nil) != (j.mt.ID%7 == 3) || j.err == nil && j.iv.Interval != j.mt.ID) {
					t.Errorf("conc %d: interval %d emitted with %v / %v", conc, j.mt.ID, j.iv, j.err)
				}
				if !j.tick {
					got = append(got, j.mt.ID)
				}
			})
		}()
		for id := int64(0); id < n; id++ {
			est.submit(&estJob{mt: &interval.Matched{ID: id}})
			if id%50 == 0 {
				est.submit(&estJob{tick: true}) // ticks pass in order, unestimated
			}
		}
		est.close()
		<-emitted
		if len(got) != n {
			t.Fatalf("conc %d: %d of %d intervals emitted", conc, len(got), n)
		}
		for i, id := range got {
			if id != int64(i) {
				t.Fatalf("conc %d: emission %d is interval %d (order lost)", conc, i, id)
			}
		}
		if peak.Load() != int32(size) || peakShare.Load() != int32(size) {
			t.Errorf("conc %d: at most %d estimations ran at once (knew of %d), want %d", conc, peak.Load(), peakShare.Load(), size)
		}
	}
}

// raise sets a to v if v is larger.
func raise(a *atomic.Int32, v int32) {
	for {
		p := a.Load()
		if v <= p || a.CompareAndSwap(p, v) {
			return
		}
	}
}
