package sketch

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
)

// goldenFile pins EstimateDecodeAndPaper's output bit for bit: for each
// case, SHA-256 digests of every output field's bits over blocks of
// goldenBlock flows (a mismatch names the block). Regenerate it only for
// a change meant to move the estimates:
//
//	LDS_UPDATE_GOLDEN=1 go test -run TestDecodeGolden ./internal/sketch/
const (
	goldenFile  = "testdata/decode_golden.txt"
	goldenBlock = 1000
)

// goldenCase is one fixed generated trace and the options it is decoded with.
type goldenCase struct {
	name  string
	input func(t *testing.T) (snd, rcv *LDS, comp []FlowComposition, opt DecodeOptions)
}

func goldenCases() []goldenCase {
	weighted := func(p Params, seed uint64, nFlows int, loss, heavy float64) func(t *testing.T) (*LDS, *LDS, []FlowComposition, DecodeOptions) {
		return func(t *testing.T) (*LDS, *LDS, []FlowComposition, DecodeOptions) {
			sndP, rcvP, flows := simulateLossy(seed, nFlows, loss, heavy)
			weight := func(f uint64) float64 {
				if f%3 == 0 {
					return 4
				}
				return 1
			}
			for _, ps := range [][]pk{sndP, rcvP} {
				for i := range ps {
					ps[i].w = uint32(weight(ps[i].flow))
				}
			}
			snd, rcv := build(t, p, sndP, rcvP)
			keys := make([]uint64, len(flows))
			for i, f := range flows {
				keys[i] = f.hash
			}
			comp := compositions(rcv, keys, rcvP)
			for i := range comp {
				comp[i].Weight = weight(comp[i].Flow)
			}
			return snd, rcv, comp, DecodeOptions{Paper: EstimateOptions{Weight: weight}}
		}
	}
	plain := func(p Params, seed uint64, nFlows int, loss, heavy float64) func(t *testing.T) (*LDS, *LDS, []FlowComposition, DecodeOptions) {
		return func(t *testing.T) (*LDS, *LDS, []FlowComposition, DecodeOptions) {
			sndP, rcvP, flows := simulateLossy(seed, nFlows, loss, heavy)
			snd, rcv := build(t, p, sndP, rcvP)
			keys := make([]uint64, len(flows))
			for i, f := range flows {
				keys[i] = f.hash
			}
			return snd, rcv, compositions(rcv, keys, rcvP), DecodeOptions{}
		}
	}
	return []goldenCase{
		// Multi-bank k = 5, two exact rows, lossy: every stage's parallel path.
		{"multibank k=5 lossy", func(t *testing.T) (*LDS, *LDS, []FlowComposition, DecodeOptions) {
			snd, rcv, comp := lossyMultibank(t)
			return snd, rcv, comp, DecodeOptions{}
		}},
		// The paper's load, k = 1, no sampling: flows alone in cells, the
		// single-cell closed form and the scan of the identification.
		{"paper load k=1", plain(Params{Rows: 4, Columns: 1000, VLDA: 1}, 5, 8000, 0.002, 0.01)},
		// Every row sampled (no exact row: the loss EM over all rows) and a
		// third of the flows weighted.
		{"sampled rows weighted k=3", weighted(Params{Rows: 4, Columns: 1500, VLDA: 3, Sampling: []float64{0.2, 0.4, 0.6, 0.8}}, 13, 6000, 0.005, 0.02)},
	}
}

// goldenDigests returns, per block of flows, the digest of every output
// field's bits of both estimates.
func goldenDigests(dec, pap []FlowEstimate) []string {
	var out []string
	for lo := 0; lo < len(dec); lo += goldenBlock {
		h := sha256.New()
		var b []byte
		for i := lo; i < min(len(dec), lo+goldenBlock); i++ {
			for _, e := range []FlowEstimate{dec[i], pap[i]} {
				b = b[:0]
				b = binary.LittleEndian.AppendUint64(b, e.Flow)
				for _, v := range []float64{e.Delay, e.Stddev, e.CI95, e.Samples, e.Loss, e.LossBound, e.Packets, e.Bytes} {
					b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
				}
				b = binary.LittleEndian.AppendUint64(b, uint64(e.Usable))
				if e.Identified {
					b = append(b, 1)
				} else {
					b = append(b, 0)
				}
				h.Write(b)
			}
		}
		out = append(out, fmt.Sprintf("%x", h.Sum(nil)[:16]))
	}
	return out
}

// TestDecodeGolden: the decoder's output is the golden file's, bit for bit,
// at GOMAXPROCS 1, 2 and 8 and whatever the parallel stages' grain: the
// refactoring and scheduling of the stages must never move a result. The
// golden file holds amd64's bits (other architectures fuse multiply-adds).
func TestDecodeGolden(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the golden file holds amd64's floating-point bits; %s may fuse multiply-adds", runtime.GOARCH)
	}
	want := map[string]string{}
	if os.Getenv("LDS_UPDATE_GOLDEN") != "1" {
		f, err := os.Open(goldenFile)
		if err != nil {
			t.Fatalf("%v (regenerate with LDS_UPDATE_GOLDEN=1 only for a change meant to move the estimates)", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
				k, v, _ := strings.Cut(line, "\t")
				want[k] = v
			}
		}
	}
	var lines []string
	for _, c := range goldenCases() {
		snd, rcv, comp, opt := c.input(t)
		for _, procs := range []int{1, 2, 8} {
			for _, grain := range []int{0, 1} {
				func() {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
					o := opt
					o.grain = grain
					dec, pap, err := EstimateDecodeAndPaper(snd, rcv, comp, o)
					if err != nil {
						t.Fatal(err)
					}
					got := goldenDigests(dec, pap)
					for b, g := range got {
						key := fmt.Sprintf("%s/flows %d-%d", c.name, b*goldenBlock, min(len(dec), (b+1)*goldenBlock)-1)
						if procs == 1 && grain == 0 {
							lines = append(lines, key+"\t"+g)
						}
						if w, ok := want[key]; ok && w != g {
							t.Errorf("GOMAXPROCS=%d grain %d: %s: digest %s, golden %s", procs, grain, key, g, w)
						} else if !ok && len(want) > 0 {
							t.Errorf("%s: not in %s", key, goldenFile)
						}
					}
				}()
			}
		}
	}
	if len(want) == 0 {
		out := "# EstimateDecodeAndPaper output digests (golden_test.go); LDS_UPDATE_GOLDEN=1 rewrites\n" + strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(goldenFile, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenFile)
	} else if len(want) != len(lines) {
		t.Errorf("%s has %d blocks, the cases %d", goldenFile, len(want), len(lines))
	}
}
