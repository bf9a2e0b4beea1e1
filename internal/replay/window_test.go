package replay

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/gen"
)

// TestReplayDelaysBeyondTheWindow replays traces whose one-way delays are
// far above the first hold window (50 ms), against the exact join:
//   - at default settings (max_delay 1s) with the delays of a congested
//     link (107-254 ms), the window grows after the first interval shows
//     them; before that the intervals are flagged, never reported as loss;
//     after it every flow is measured as on a fast link;
//   - with max_delay 20ms and delays of 95-105 ms, every interval is
//     flagged and no flow is ever given loss it did not have.
func TestReplayDelaysBeyondTheWindow(t *testing.T) {
	tests := []struct {
		name       string
		maxDelay   time.Duration // 0: the default
		lo, hi     time.Duration
		loss       float64
		exactAfter int // intervals from the first after which every flow must be unflagged and measured
	}{
		{name: "congested link at default settings", lo: 107 * time.Millisecond, hi: 254 * time.Millisecond, exactAfter: 2},
		{name: "congested link with loss", lo: 107 * time.Millisecond, hi: 254 * time.Millisecond, loss: 0.01, exactAfter: 2},
		{name: "max_delay 20ms, delays 95-105 ms", maxDelay: 20 * time.Millisecond, lo: 95 * time.Millisecond, hi: 105 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := scenario(21, tc.loss)
			sc.Duration = 7 * time.Second
			sc.MaxDelay = time.Second
			sc.Classes[0].Delay = gen.DelayModel{Kind: gen.DelayUniform, Min: tc.lo, Max: tc.hi}
			var logBuf syncBuffer
			r := replayScenarioLog(t, sc, func(o *Options) {
				if tc.maxDelay > 0 {
					o.Config.MaxDelay = tc.maxDelay
				}
			}, &logBuf)
			// The log says it once an episode: the window is growing, or
			// (at max_delay) which setting to raise.
			logs := logBuf.String()
			want := "the window is growing"
			if tc.maxDelay > 0 {
				want = "raise max_delay (now " + tc.maxDelay.String() + ") on both ends"
			}
			if n := strings.Count(logs, "loss withheld (status delay_beyond_window)"); n != 1 || !strings.Contains(logs, want) {
				t.Errorf("%d log lines about delay_beyond_window, want 1 saying %q:\n%s", n, want, logs)
			}
			t.Logf("interval outcomes %v", r.outcome)
			var ids []int64
			for id := range r.truth.Flows {
				ids = append(ids, id.Interval)
			}
			first := slices.Min(ids)
			flaggedIv := map[int64]bool{}
			falseLoss, missed, lossy, big, bigDelay, fromSamples, samplesOut := 0, 0, 0, 0, 0, 0, 0
			var relErr []float64
			for id, f := range r.truth.Flows {
				rec, ok := r.recs[id]
				if !ok {
					continue // a flow whose only packets sat in a flagged neighbour
				}
				flagged := rec.Status == results.StatusBeyondWindow
				if flagged {
					flaggedIv[id.Interval] = true
				}
				if rec.LossOr(0) > 0 && f.Lost() == 0 {
					falseLoss++
					t.Errorf("interval %d flow %v: false loss %v (status %q)", id.Interval-first, id.Key, rec.Loss, rec.Status)
				}
				if flagged && (rec.Loss != nil || rec.LossPoint != nil) {
					t.Errorf("interval %d flow %v: flagged but loss %v / %v published", id.Interval-first, id.Key, rec.Loss, rec.LossPoint)
				}
				if tc.exactAfter == 0 || id.Interval-first < int64(tc.exactAfter) {
					continue
				}
				// After the window adapted: measured as on a fast link.
				if flagged {
					t.Errorf("interval %d flow %v: flagged after the window adapted", id.Interval-first, id.Key)
				}
				if f.Lost() > 0 {
					lossy++
					if rec.LossOr(-1)+1e-9 < float64(f.Lost()) {
						missed++
					}
				}
				if f.Received >= 100 {
					big++
					switch {
					case rec.DelayNS == nil:
					case rec.DelayFrom == results.DelayFromSamples:
						// A lossy flow's mean from its joined samples
						// (about a quarter of its packets): held to its
						// ci95, the sketch's exactness below is not its.
						bigDelay++
						fromSamples++
						if math.Abs(*rec.DelayNS-f.MeanNS) > *rec.CI95NS {
							samplesOut++
						}
					default:
						bigDelay++
						relErr = append(relErr, math.Abs(*rec.DelayNS-f.MeanNS)/f.MeanNS)
					}
				}
			}
			if falseLoss > 0 {
				t.Errorf("%d flows with false loss", falseLoss)
			}
			if tc.exactAfter == 0 {
				// Every interval with packets across its boundaries is flagged.
				for iv := first; iv < first+6; iv++ {
					if !flaggedIv[iv] {
						t.Errorf("interval %d not flagged although its packets cross boundaries 5x slower than max_delay", iv-first)
					}
				}
				return
			}
			if missed > 0 {
				t.Errorf("%d of %d lossy flows under-reported after the window adapted", missed, lossy)
			}
			// With loss, vLDA 1 leaves lossy flows no usable cell (as on a
			// fast link): their delays come from their samples; coverage
			// is checked without loss.
			if samplesOut*10 > fromSamples {
				t.Errorf("%d of %d delays from samples outside their ci95", samplesOut, fromSamples)
			}
			if big < 20 || tc.loss == 0 && bigDelay*100 < big*95 {
				t.Errorf("delay coverage after the window adapted: %d of %d flows >= 100 packets", bigDelay, big)
			}
			slices.Sort(relErr)
			if len(relErr) > 0 && relErr[len(relErr)/2] > 0.01 {
				t.Errorf("median relative delay error %.3g above 1%%", relErr[len(relErr)/2])
			}
			t.Logf("flagged intervals %v (from the first); after: %d flows >= 100 packets, %d with delay (%d from samples, %d of them outside their ci95), %d lossy all detected",
				keys(flaggedIv, first), big, bigDelay, fromSamples, samplesOut, lossy)
		})
	}
}

func keys(m map[int64]bool, first int64) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k-first)
	}
	slices.Sort(out)
	return out
}

// syncBuffer is a bytes.Buffer safe for the pipelines' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
