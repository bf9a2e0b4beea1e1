package results

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMarshalLineMatchesEncodingJSON holds the hand-written encoder to
// encoding/json's output, byte for byte, over random records and the edge
// cases of float formatting and string escaping.
func TestMarshalLineMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 1e20, 1e21, 123456789.123,
		-3.25e-9, math.MaxFloat64, math.SmallestNonzeroFloat64, 5e-324, 1.0 / 3}
	strs := []string{"", "10.0.0.1", "2001:db8::1", "paper", "decode", `a"b`, `back\slash`, "<tag>&", "tab\there",
		"\x00\x1f", "é ü", "\u2028\u2029", "bad\xffutf8", "\x7f", "sender-1"}
	pf := func() *float64 {
		if rng.IntN(4) == 0 {
			return nil
		}
		v := floats[rng.IntN(len(floats))]
		if rng.IntN(2) == 0 {
			v = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
		}
		return &v
	}
	f := func() float64 { return *or(pf(), 0) }
	s := func() string { return strs[rng.IntN(len(strs))] }
	for i := 0; i < 20000; i++ {
		r := FlowRecord{Interval: rng.Int64() >> rng.IntN(63), StartNS: -rng.Int64N(1 << 62), Src: s(), Dst: s(),
			SPort: uint16(rng.Uint32()), DPort: uint16(rng.Uint32()), Proto: uint8(rng.Uint32()), DelayNS: pf(), StddevNS: pf(),
			Loss: f(), Packets: f(), Samples: f(), CI95NS: pf(), Sender: s(), Bytes: pf(), Estimator: s(),
			Partial: rng.IntN(2) == 0, Unsynced: rng.IntN(2) == 0, ErrorNS: pf(), Spike: rng.IntN(2) == 0, Status: s(), LossPoint: pf(),
			P50NS: pf(), P90NS: pf(), P99NS: pf(), DelaySamples: rng.IntN(300), StddevFrom: s(), SampledLost: rng.IntN(3), LossBound: pf()}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := MarshalLine([]byte("prefix"), &r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "prefix"+string(want)+"\n" {
			t.Fatalf("record %+v:\n got %s\nwant %s", r, got[6:], want)
		}
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		r := FlowRecord{Packets: bad}
		if _, err := MarshalLine(nil, &r); err == nil {
			t.Fatalf("packets %v: no error (encoding/json refuses it too)", bad)
		}
	}
}

func or(p *float64, v float64) *float64 {
	if p == nil {
		return &v
	}
	return p
}

func BenchmarkMarshalLine(b *testing.B) {
	d, sd, ci := 123456.789, 2345.6, 99.5
	r := FlowRecord{Interval: 1763000100, StartNS: 1763000100000000000, Src: "10.1.2.3", Dst: "192.0.2.77", SPort: 443, DPort: 51234,
		Proto: 6, DelayNS: &d, StddevNS: &sd, Loss: 0, Packets: 1234, Samples: 1200, CI95NS: &ci, Sender: "tap-a", Estimator: "decode"}
	b.Run("hand", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = MarshalLine(buf[:0], &r)
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(&r)
		}
	})
}
