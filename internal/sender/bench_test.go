package sender

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/test/testutil"
)

// BenchmarkPacketPath: the sender's whole per-packet path from a frame in
// memory: parse, flow key, both hashes, then the interval builder (LDS
// update, LDA update, boundary list, heavy-flow count) and the packet
// sampler (internal/sample). One core. The nosample variants leave the
// sampler out, to show its cost.
func BenchmarkPacketPath(b *testing.B) {
	for _, tc := range []struct {
		name     string
		vlda     int
		sampling []float64
		cols     int
	}{
		{"R4-k1-C4096", 1, []float64{1, 1, 1, 1}, 4096},
		{"R4-k1-C17500", 1, []float64{1, 1, 1, 1}, 17500},
		{"R4-k5-multibank-C87500", 5, []float64{0.01, 0.1, 0.5, 1}, 87500},
	} {
		for _, withSample := range []bool{true, false} {
			name := tc.name
			if !withSample {
				name += "-nosample"
			}
			b.Run(name, func(b *testing.B) {
				c := config.DefaultCommon()
				c.Sketch.VLDA, c.Sketch.Sampling, c.Sketch.Columns = tc.vlda, tc.sampling, tc.cols
				p, err := capture.NewParser(c.CaptureConfig())
				if err != nil {
					b.Fatal(err)
				}
				ip := interval.Params{T: int64(time.Second), MaxDelay: int64(c.MaxDelay), Guard: int64(c.Guard),
					Sketch: c.SketchParams(), LDA: c.LDAParams(), Classes: 1, Heavy: 1000, FlowCap: 1 << 20}
				sb, err := interval.NewSenderBuilder(ip, 0)
				if err != nil {
					b.Fatal(err)
				}
				pool := sample.NewPool(4)
				smp := sample.NewSampler(c.Sample, int64(time.Second), pool)
				frames := makeFrames(b, 4096, 20000)
				var pkt capture.Packet
				emit := func(si *interval.SenderInterval) { pool.Put(smp.Take(si.ID)) } // as ship does after selecting
				b.ReportAllocs()
				done := testutil.CPUMeter(b)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					f := frames[i&4095]
					if !p.Parse(f, len(f), int64(i)*1000, layers.LinkTypeEthernet, &pkt) {
						b.Fatal("frame not parsed")
					}
					if withSample {
						smp.Add(&pkt)
					}
					sb.Add(&pkt, emit)
				}
				done()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
			})
		}
	}
}

// pathPipe is one sender packet path as the benchmarks run it.
type pathPipe struct {
	p    *capture.Parser
	sb   *interval.SenderBuilder
	smp  *sample.Sampler // nil: no sampler
	emit func(*interval.SenderInterval)
	pkt  capture.Packet
	i    int
}

func newPathPipe(b *testing.B, vlda, cols int, sampling []float64, withSample bool) *pathPipe {
	c := config.DefaultCommon()
	c.Sketch.VLDA, c.Sketch.Sampling, c.Sketch.Columns = vlda, sampling, cols
	p, err := capture.NewParser(c.CaptureConfig())
	if err != nil {
		b.Fatal(err)
	}
	ip := interval.Params{T: int64(time.Second), MaxDelay: int64(c.MaxDelay), Guard: int64(c.Guard),
		Sketch: c.SketchParams(), LDA: c.LDAParams(), Classes: 1, Heavy: 1000, FlowCap: 1 << 20}
	sb, err := interval.NewSenderBuilder(ip, 0)
	if err != nil {
		b.Fatal(err)
	}
	pp := &pathPipe{p: p, sb: sb, emit: func(*interval.SenderInterval) {}}
	if withSample {
		pool := sample.NewPool(4)
		pp.smp = sample.NewSampler(c.Sample, int64(time.Second), pool)
		pp.emit = func(si *interval.SenderInterval) { pool.Put(pp.smp.Take(si.ID)) }
	}
	return pp
}

// run feeds n more packets (1 µs apart) through the path.
func (pp *pathPipe) run(b *testing.B, frames [][]byte, n int) {
	for end := pp.i + n; pp.i < end; pp.i++ {
		f := frames[pp.i&4095]
		if !pp.p.Parse(f, len(f), int64(pp.i)*1000, layers.LinkTypeEthernet, &pp.pkt) {
			b.Fatal("frame not parsed")
		}
		if pp.smp != nil {
			pp.smp.Add(&pp.pkt)
		}
		pp.sb.Add(&pp.pkt, pp.emit)
	}
}

// BenchmarkPacketPathPaired: the sampler's cost on the whole packet path
// measured on a loaded machine. Two identical paths, one with the sampler
// and one without, take turns on chunks of 262,144 packets in the same
// process; each chunk's thread CPU time and wall time are taken, and the
// medians of the per-pair ratios (with/without) are reported as
// "sampler-cpu-%" and "sampler-wall-%" (the added cost in percent). Load
// from other processes hits both paths of a pair alike.
func BenchmarkPacketPathPaired(b *testing.B) {
	const chunk = 1 << 18
	frames := makeFrames(b, 4096, 20000)
	for _, tc := range []struct {
		name     string
		vlda     int
		sampling []float64
		cols     int
	}{
		{"R4-k1-C4096", 1, []float64{1, 1, 1, 1}, 4096},
		{"R4-k5-multibank-C87500", 5, []float64{0.01, 0.1, 0.5, 1}, 87500},
	} {
		b.Run(tc.name, func(b *testing.B) {
			with := newPathPipe(b, tc.vlda, tc.cols, tc.sampling, true)
			without := newPathPipe(b, tc.vlda, tc.cols, tc.sampling, false)
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
				b.ReportMetric(100*(median(cpuR)-1), "sampler-cpu-%")
				b.ReportMetric(100*(median(wallR)-1), "sampler-wall-%")
				b.ReportMetric(float64(len(cpuR)), "pairs")
			}
		})
	}
}

func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	return (v[(n-1)/2] + v[n/2]) / 2
}

// makeFrames builds n Ethernet/IPv4/TCP frames over the given number of flows.
func makeFrames(b *testing.B, n, flows int) [][]byte {
	b.Helper()
	out := make([][]byte, n)
	payload := make([]byte, 200)
	for i := range out {
		f := (i * 7919) % flows
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, Id: uint16(i),
			SrcIP: net.IP{10, byte(f >> 16), byte(f >> 8), byte(f)}, DstIP: net.IP{192, 0, 2, 1}}
		tcp := &layers.TCP{SrcPort: layers.TCPPort(1024 + f%60000), DstPort: 443, Seq: uint32(i) * 1448, ACK: true, Window: 512}
		if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
			b.Fatal(err)
		}
		payload[0], payload[1] = byte(i), byte(i>>8)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload(payload)); err != nil {
			b.Fatal(err)
		}
		out[i] = append([]byte(nil), buf.Bytes()...)
	}
	return out
}

// memSource plays frames from memory, 1 µs apart, n of them, then ends.
type memSource struct {
	frames [][]byte
	i, n   int
}

func (m *memSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	if m.i == m.n {
		return nil, 0, 0, io.EOF
	}
	f := m.frames[m.i&(len(m.frames)-1)]
	m.i++
	return f, int64(m.i) * 1000, len(f), nil
}
func (m *memSource) LinkType() layers.LinkType         { return layers.LinkTypeEthernet }
func (m *memSource) Stats() (capture.DropStats, error) { return capture.DropStats{}, nil }
func (m *memSource) Close() error                      { return nil }

// BenchmarkCaptureLoop is one capture worker of the sender as it runs:
// the capture loop (internal/tap) over a source in memory, with the
// sender's callbacks (parse, sampler, interval builder) and its intervals
// handed on at 1 Mpps of event time, default sketch.
func BenchmarkCaptureLoop(b *testing.B) {
	cfg := config.DefaultSender()
	cc := cfg.CaptureConfig()
	p, err := capture.NewParser(cc)
	if err != nil {
		b.Fatal(err)
	}
	ip := interval.Params{T: int64(cfg.Interval), MaxDelay: int64(cfg.MaxDelay), Guard: int64(cfg.Guard),
		Sketch: cfg.SketchParams(), LDA: cfg.LDAParams(), Classes: len(cc.Classes) + 1, Heavy: cfg.Sketch.Heavy, FlowCap: cfg.Sketch.MaxFlows, LostCells: cfg.Lost.Cells()}
	s := &Sender{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), params: ip, cc: cc, pool: sample.NewPool(8), windows: interval.NewWindowTable()}
	rd := capture.NewReader(&memSource{frames: makeFrames(b, 4096, 20000), n: b.N}, p)
	out := make(chan *interval.SenderInterval, 8)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for si := range out {
			s.pool.Put(si.SampleCands)
			si.Release()
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	if err := s.captureLoop(context.Background(), rd, 0, out); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	close(out)
	<-drained
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
}
