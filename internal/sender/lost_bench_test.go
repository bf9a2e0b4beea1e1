package sender

import (
	"runtime"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/test/testutil"
)

// newLostPathPipe is newPathPipe (sampler on) with the lost-packet table of
// lost.capacity capacity (0: none).
func newLostPathPipe(b *testing.B, vlda, cols int, sampling []float64, capacity int, finish bool) *pathPipe {
	c := config.DefaultCommon()
	c.Sketch.VLDA, c.Sketch.Sampling, c.Sketch.Columns = vlda, sampling, cols
	c.Lost.Capacity = capacity
	p, err := capture.NewParser(c.CaptureConfig())
	if err != nil {
		b.Fatal(err)
	}
	ip := interval.Params{T: int64(time.Second), MaxDelay: int64(c.MaxDelay), Guard: int64(c.Guard),
		Sketch: c.SketchParams(), LDA: c.LDAParams(), Classes: 1, Heavy: 1000, FlowCap: 1 << 20, LostCells: c.Lost.Cells()}
	sb, err := interval.NewSenderBuilder(ip, 0)
	if err != nil {
		b.Fatal(err)
	}
	pool := sample.NewPool(4)
	pp := &pathPipe{p: p, sb: sb, smp: sample.NewSampler(c.Sample, int64(time.Second), pool)}
	// As the sender: the packet logs go back once the receiver's question
	// is answered (here at once).
	pp.emit = func(si *interval.SenderInterval) {
		if finish {
			_ = si.Finish() // the ship goroutine's work, here on the same thread
		}
		pool.Put(pp.smp.Take(si.ID))
		si.Release()
		for _, l := range si.Logs {
			l.Release()
		}
	}
	return pp
}

// BenchmarkPacketPathLostPaired: the lost-packet table's cost on the whole
// sender packet path (parser, sampler, sketches), measured as
// BenchmarkPacketPathPaired measures the sampler's: two identical paths,
// one with the table (lost.capacity 1000, the default) and one without,
// take turns on chunks of 262,144 packets; "lost-cpu-%" and "lost-wall-%"
// are the medians of the per-pair ratios, in percent added. The "-finish"
// case also finishes each interval on the same thread: the sender's whole
// CPU, the table's build from the packet log included.
func BenchmarkPacketPathLostPaired(b *testing.B) {
	const chunk = 1 << 18
	frames := makeFrames(b, 4096, 20000)
	for _, tc := range []struct {
		name     string
		vlda     int
		sampling []float64
		cols     int
		finish   bool
	}{
		{"R4-k1-C4096", 1, []float64{1, 1, 1, 1}, 4096, false},
		{"R4-k5-multibank-C87500", 5, []float64{0.01, 0.1, 0.5, 1}, 87500, false},
		// With each interval finished on the same thread (boundary
		// function, heavy ranking, and the lost-packet table built from
		// the log): the sender's whole CPU, not only the capture path's.
		{"R4-k1-C4096-finish", 1, []float64{1, 1, 1, 1}, 4096, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			with := newLostPathPipe(b, tc.vlda, tc.cols, tc.sampling, 1000, tc.finish)
			without := newLostPathPipe(b, tc.vlda, tc.cols, tc.sampling, 0, tc.finish)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpuR, wallR []float64
			var cpuW, cpuWo int64
			measure := func(pp *pathPipe, n int) (cpu, wall int64) {
				c0, w0 := testutil.ThreadCPU(), time.Now()
				pp.run(b, frames, n)
				return testutil.ThreadCPU() - c0, time.Since(w0).Nanoseconds()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				c1, w1 := measure(with, n)
				c2, w2 := measure(without, n)
				cpuW, cpuWo = cpuW+c1, cpuWo+c2
				if n == chunk && c2 > 0 {
					cpuR, wallR = append(cpuR, float64(c1)/float64(c2)), append(wallR, float64(w1)/float64(w2))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuW)/float64(b.N), "cpu-ns/op-with")
			b.ReportMetric(float64(cpuWo)/float64(b.N), "cpu-ns/op-without")
			if len(cpuR) > 0 {
				b.ReportMetric(100*(median(cpuR)-1), "lost-cpu-%")
				b.ReportMetric(100*(median(wallR)-1), "lost-wall-%")
				b.ReportMetric(float64(len(cpuR)), "pairs")
			}
		})
	}
}
