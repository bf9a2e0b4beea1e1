package api

import (
	"runtime"
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/results"
)

// receiverRecord fills a flow record the way the receiver does for an
// identified flow of the decoding estimator (internal/receiver/estimate.go).
func receiverRecord(id int64, k capture.FlowKey, errorNS *float64) results.FlowRecord {
	r := results.FlowRecord{Interval: id, StartNS: id * 1e9, Key: k, Loss: results.Float(1), Packets: 1234, Samples: 1200,
		Sender: "tap-a", Estimator: "decode", ErrorNS: errorNS}
	r.LossBound, r.LossPoint = results.Float(1), results.Float(0.5)
	r.DelayNS, r.StddevNS, r.CI95NS = results.Float(123456.7), results.Float(2345.6), results.Float(99.5)
	r.StddevFrom = "sketch"
	return r
}

// BenchmarkStoreMemory reports the live heap per flow record held by a
// Store of 60 intervals (the default keep) of 20k flows each, one in five
// of them IPv6, built as the receiver builds them.
func BenchmarkStoreMemory(b *testing.B) {
	const intervals, flows = DefaultKeep, 20_000
	errorNS := results.Float(250)
	var perRecord float64
	for b.Loop() {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		s := NewStore(intervals)
		for id := range int64(intervals) {
			iv := &results.Interval{Sender: "tap-a", Interval: id, StartNS: id * 1e9, Outcome: results.OutcomeMatched,
				Flows: make([]results.FlowRecord, flows)}
			for i := range iv.Flows {
				k := capture.FlowKey{Src: [16]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}, Dst: [16]byte{192, 0, 2, 1},
					SPort: uint16(i), DPort: 443, Proto: 6}
				if i%5 == 0 {
					k.Src = [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x0a, 0, 0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, byte(i >> 8), byte(i)}
					k.Dst = [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x0b, 14: 1, 15: 7}
					k.V6 = true
				}
				iv.Flows[i] = receiverRecord(id, k, errorNS)
			}
			s.Add(iv)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		perRecord = float64(m1.HeapAlloc-m0.HeapAlloc) / float64(s.Records())
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perRecord, "B/record")
}
