package results

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lds-net/lds/internal/capture"
)

// toJSON is r in its JSON shape, for encoding/json.
func toJSON(r *FlowRecord) flowJSON {
	return flowJSON{Interval: r.Interval, StartNS: r.StartNS, Src: r.Key.SrcAddr().String(), Dst: r.Key.DstAddr().String(),
		SPort: r.Key.SPort, DPort: r.Key.DPort, Proto: r.Key.Proto, DelayNS: r.DelayNS, StddevNS: r.StddevNS,
		Loss: r.Loss, Packets: r.Packets, Samples: r.Samples, CI95NS: r.CI95NS, Sender: r.Sender, Bytes: r.Bytes,
		Estimator: r.Estimator, Partial: r.Partial, Unsynced: r.Unsynced, ErrorNS: r.ErrorNS, Spike: r.Spike,
		Status: r.Status, LossPoint: r.LossPoint, P50NS: r.P50NS, P90NS: r.P90NS, P99NS: r.P99NS,
		DelaySamples: r.DelaySamples, StddevFrom: r.StddevFrom, SampledLost: r.SampledLost, LossBound: r.LossBound,
		DelayFrom: r.DelayFrom, LossSpike: r.LossSpike, P99LowNS: r.P99LowNS,
		LossExact: r.LossExact, Reordered: r.Reordered, ReorderExtentNS: r.ReorderExtentNS, RepairedCells: r.RepairedCells}
}

// TestFlowJSONHasEveryField: every FlowRecord field but the key is in the
// JSON shape under the same name, so that nothing is lost on the way out
// or in (the key is src, dst, sport, dport, proto).
func TestFlowJSONHasEveryField(t *testing.T) {
	rt, jt := reflect.TypeFor[FlowRecord](), reflect.TypeFor[flowJSON]()
	if rt.NumField()-1+5 != jt.NumField() {
		t.Fatalf("FlowRecord has %d fields, its JSON shape %d: keep them in step", rt.NumField(), jt.NumField())
	}
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.Name == "Key" {
			continue
		}
		if g, ok := jt.FieldByName(f.Name); !ok || g.Type != f.Type {
			t.Errorf("FlowRecord.%s (%s) is not in flowJSON with that type", f.Name, f.Type)
		}
	}
}

// TestMarshalLineMatchesEncodingJSON holds the hand-written encoder to
// encoding/json's output of the JSON shape, byte for byte, over random
// records and the edge cases of float formatting and string escaping; the
// lines read back as the records they came from.
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
	addrs := [][2]string{{"10.0.0.1", "192.0.2.1"}, {"0.0.0.0", "255.255.255.255"}, {"2001:db8::1", "2001:db8::2"},
		{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, {"fe80::1:2:3:4", "::1"}, {"1.2.3.4", "10.200.30.4"}}
	for i := 0; i < 20000; i++ {
		a := addrs[rng.IntN(len(addrs))]
		r := FlowRecord{Interval: rng.Int64() >> rng.IntN(63), StartNS: -rng.Int64N(1 << 62),
			Key:     capture.MustParseFlowKey(a[0], a[1], uint8(rng.Uint32()), uint16(rng.Uint32()), uint16(rng.Uint32())),
			DelayNS: pf(), StddevNS: pf(),
			Loss: pf(), Packets: f(), Samples: f(), CI95NS: pf(), Sender: s(), Bytes: pf(), Estimator: s(),
			Partial: rng.IntN(2) == 0, Unsynced: rng.IntN(2) == 0, ErrorNS: pf(), Spike: rng.IntN(2) == 0, Status: Status(s()), LossPoint: pf(),
			P50NS: pf(), P90NS: pf(), P99NS: pf(), DelaySamples: rng.IntN(300), StddevFrom: s(), SampledLost: rng.IntN(3), LossBound: pf(),
			DelayFrom: s(), LossSpike: rng.IntN(2) == 0, P99LowNS: pf(),
			LossExact: rng.IntN(2) == 0, Reordered: pf(), ReorderExtentNS: pf(), RepairedCells: rng.IntN(3)}
		want, err := json.Marshal(toJSON(&r))
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
		if viaJSON, err := json.Marshal(r); err != nil || !bytes.Equal(viaJSON, want) {
			t.Fatalf("record %+v: MarshalJSON gives %s, %v; want %s", r, viaJSON, err, want)
		}
		var back FlowRecord
		if err := json.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		lossless := utf8.ValidString(r.Sender + r.Estimator + string(r.Status) + r.StddevFrom + r.DelayFrom) // JSON replaces bad UTF-8
		if again, _ := MarshalLine(nil, &back); lossless && !bytes.Equal(again, got[6:]) {
			t.Fatalf("read back as %s, written as %s", again, got[6:])
		}
	}
	for _, bad := range []string{`{"src":"10.0.0.1"}`, `{"src":"10.0.0.1","dst":"2001:db8::1"}`, `{"src":"10.0.0.1","dst":"x"}`} {
		var r FlowRecord
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Fatalf("%s read as %+v", bad, r)
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
	r := FlowRecord{Interval: 1763000100, StartNS: 1763000100000000000, Key: capture.MustParseFlowKey("10.1.2.3", "192.0.2.77", 6, 443, 51234),
		DelayNS: &d, StddevNS: &sd, Packets: 1234, Samples: 1200, CI95NS: &ci, Sender: "tap-a", Estimator: "decode", Loss: Float(0)}
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

// TestFlagsWithholdLoss: an interval flagged for capture drops or for
// delays beyond the hold window publishes its loss as null (never 0),
// keeps its delays, and says why; capture drops win over beyond-window.
func TestFlagsWithholdLoss(t *testing.T) {
	mk := func() *Interval {
		d, l := 1e6, 3.0
		f := FlowRecord{Interval: 5, Key: capture.MustParseFlowKey("10.0.0.1", "10.0.0.2", 6, 1, 2), DelayNS: &d,
			Loss: &l, LossPoint: Float(3), LossBound: Float(4), SampledLost: 2, Packets: 100}
		return &Interval{Interval: 5, Flows: []FlowRecord{f, f}, Touched: []bool{true, false},
			Links: []LinkRecord{{Class: "default", Sent: 100, Received: 97, LossRatio: Float(0.03)}}}
	}
	tests := []struct {
		name       string
		flag       func(*Interval)
		status     []Status // per flow
		nullLoss   []bool
		drops      *CaptureDrops
		linkReason string
	}{
		{"none", func(*Interval) {}, []Status{"", ""}, []bool{false, false}, nil, ""},
		{"zero drops flag nothing", func(iv *Interval) { iv.FlagCaptureDrops(CaptureDrops{}) }, []Status{"", ""}, []bool{false, false}, nil, ""},
		{"beyond window: touched flows", func(iv *Interval) { iv.FlagBeyondWindow() },
			[]Status{StatusBeyondWindow, ""}, []bool{true, false}, nil, "beyond"},
		{"capture drops: every flow", func(iv *Interval) { iv.FlagCaptureDrops(CaptureDrops{Receiver: 7}) },
			[]Status{StatusCaptureDrops, StatusCaptureDrops}, []bool{true, true}, &CaptureDrops{Receiver: 7}, "drops"},
		{"capture drops then beyond window", func(iv *Interval) {
			iv.FlagCaptureDrops(CaptureDrops{Sender: 2})
			iv.FlagCaptureDrops(CaptureDrops{Sender: 1, Receiver: 1})
			iv.FlagBeyondWindow()
		}, []Status{StatusCaptureDrops, StatusCaptureDrops}, []bool{true, true}, &CaptureDrops{Sender: 3, Receiver: 1}, "both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			iv := mk()
			tc.flag(iv)
			for i, f := range iv.Flows {
				if f.Status != tc.status[i] || (f.Loss == nil) != tc.nullLoss[i] || f.DelayNS == nil {
					t.Errorf("flow %d: status %q loss %v delay %v, want %q null=%v and the delay kept", i, f.Status, f.Loss, f.DelayNS, tc.status[i], tc.nullLoss[i])
				}
				if tc.nullLoss[i] && (f.LossPoint != nil || f.LossBound != nil) {
					t.Errorf("flow %d: loss withheld but loss_point %v loss_bound %v", i, f.LossPoint, f.LossBound)
				}
				b, err := MarshalLine(nil, &f)
				if err != nil {
					t.Fatal(err)
				}
				if want := tc.nullLoss[i]; strings.Contains(string(b), `"loss":null`) != want {
					t.Errorf("flow %d: line %s, want loss null: %v", i, b, want)
				}
				var back FlowRecord
				if err := back.UnmarshalJSON(b[:len(b)-1]); err != nil || (back.Loss == nil) != tc.nullLoss[i] {
					t.Errorf("flow %d: read back loss %v (%v)", i, back.Loss, err)
				}
			}
			if (iv.CaptureDrops == nil) != (tc.drops == nil) || (tc.drops != nil && *iv.CaptureDrops != *tc.drops) {
				t.Errorf("capture_drops %+v, want %+v", iv.CaptureDrops, tc.drops)
			}
			l := iv.Links[0]
			withheld := tc.linkReason != ""
			if (l.LossRatio == nil) != withheld || l.CaptureDrops != (tc.linkReason == "drops" || tc.linkReason == "both") ||
				l.BeyondWindow != (tc.linkReason == "beyond" || tc.linkReason == "both") {
				t.Errorf("link %+v, want withheld=%v for %q", l, withheld, tc.linkReason)
			}
		})
	}
}

// TestFlagsMakeLostListIncomplete: an interval whose complete lost-packet
// list made its loss exact loses that exactness when it is flagged for
// capture drops (a dropped packet is listed as lost or extra) or for
// delays beyond the hold window (misplaced packets are listed too): the
// list says why, no flow claims loss_exact, and the first reason stays.
func TestFlagsMakeLostListIncomplete(t *testing.T) {
	mk := func() *Interval {
		f := FlowRecord{Interval: 5, Key: capture.MustParseFlowKey("10.0.0.1", "10.0.0.2", 6, 1, 2), Loss: Float(2),
			LossBound: Float(2), Packets: 100, LossExact: true}
		return &Interval{Interval: 5, Flows: []FlowRecord{f, f}, Touched: []bool{true, false},
			LostList: &LostSummary{Complete: true, Lost: 4},
			Lost:     []LostPacket{{Interval: 5, Key: f.Key}, {Interval: 5, Key: f.Key}, {Interval: 5, Key: f.Key}, {Interval: 5, Key: f.Key}}}
	}
	tests := []struct {
		name   string
		flag   func(*Interval)
		reason string // "": the list stays complete
	}{
		{"none", func(*Interval) {}, ""},
		{"zero drops", func(iv *Interval) { iv.FlagCaptureDrops(CaptureDrops{}) }, ""},
		{"receiver drops", func(iv *Interval) { iv.FlagCaptureDrops(CaptureDrops{Receiver: 3}) }, string(StatusCaptureDrops)},
		{"sender drops", func(iv *Interval) { iv.FlagCaptureDrops(CaptureDrops{Sender: 1}) }, string(StatusCaptureDrops)},
		{"beyond window", func(iv *Interval) { iv.FlagBeyondWindow() }, string(StatusBeyondWindow)},
		{"drops then beyond window", func(iv *Interval) {
			iv.FlagCaptureDrops(CaptureDrops{Receiver: 3})
			iv.FlagBeyondWindow()
		}, string(StatusCaptureDrops)},
		{"beyond window then drops", func(iv *Interval) {
			iv.FlagBeyondWindow()
			iv.FlagCaptureDrops(CaptureDrops{Receiver: 3})
		}, string(StatusBeyondWindow)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			iv := mk()
			tc.flag(iv)
			if l := iv.LostList; l.Complete != (tc.reason == "") || l.Reason != tc.reason || l.Lost != 4 || len(iv.Lost) != 4 {
				t.Errorf("lost_list %+v with %d listed, want complete=%v reason %q and the list kept", *l, len(iv.Lost), tc.reason == "", tc.reason)
			}
			for i, f := range iv.Flows {
				if f.LossExact != (tc.reason == "") {
					t.Errorf("flow %d: loss_exact %v with the list's reason %q", i, f.LossExact, tc.reason)
				}
				if f.LossExact && f.Loss == nil {
					t.Errorf("flow %d: loss_exact with a withheld loss", i)
				}
			}
		})
	}
	// Without lost-packet tables there is no list to mark.
	iv := &Interval{Flows: []FlowRecord{{Loss: Float(1)}}}
	iv.FlagCaptureDrops(CaptureDrops{Receiver: 1})
	if iv.LostList != nil {
		t.Errorf("lost_list %+v on an interval without tables", *iv.LostList)
	}
}

// FuzzFlowRecordJSON: whatever UnmarshalJSON accepts, MarshalLine writes
// back (or refuses with an error) and reads again the same, a withheld
// (null) loss staying null.
func FuzzFlowRecordJSON(f *testing.F) {
	f.Add([]byte(`{"interval":1,"src":"10.0.0.1","dst":"10.0.0.2","proto":6,"loss":null,"status":"capture_drops"}`))
	f.Add([]byte(`{"interval":1,"src":"2001:db8::1","dst":"2001:db8::2","proto":17,"loss":2.5,"packets":10,"loss_bound":3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r FlowRecord
		if err := r.UnmarshalJSON(b); err != nil {
			return
		}
		line, err := MarshalLine(nil, &r)
		if err != nil {
			return // a non-finite count: refused, never written
		}
		var back FlowRecord
		if err := back.UnmarshalJSON(line[:len(line)-1]); err != nil {
			t.Fatalf("%s does not read back: %v", line, err)
		}
		if (back.Loss == nil) != (r.Loss == nil) || (r.Loss != nil && *back.Loss != *r.Loss) {
			t.Fatalf("loss %v read back as %v from %s", r.Loss, back.Loss, line)
		}
	})
}
