package gen

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkGenerate measures generation speed on a paper-like mix (snaplen
// 128, truth written); one op is one packet.
func BenchmarkGenerate(b *testing.B) {
	sc := DefaultScenario()
	sc.Flows = 2000
	sc.Duration = 10 * time.Second
	sc.RatePPS = float64(max(b.N, 20000)) / sc.Duration.Seconds()
	sc.FlowSize.Max = 0
	dir := b.TempDir()
	out := Outputs{SenderPcap: filepath.Join(dir, "a.pcap"), ReceiverPcap: filepath.Join(dir, "b.pcap"), Truth: filepath.Join(dir, "t.jsonl")}
	b.ReportAllocs()
	b.ResetTimer()
	sum, err := Generate(context.Background(), sc, out, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(sum.Packets)/sum.Elapsed.Seconds(), "pkts/s")
}
