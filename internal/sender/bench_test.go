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
// update, LDA update, boundary log, heavy-flow count) and the packet
// sampler (internal/sample), at the default configuration (max_delay
// 1s: every packet enters the boundary log); each interval is handed on
// and released as the ship goroutine does (its boundary function is not
// built here: BenchmarkPacketPathMaxDelayPaired). One core. The nosample
// variants leave the sampler out, to show its cost; the maxdelay50ms one
// is the first case at max_delay 50ms, beside the default.
func BenchmarkPacketPath(b *testing.B) {
	for _, tc := range []struct {
		name     string
		vlda     int
		sampling []float64
		cols     int
		maxDelay time.Duration // 0: the default
	}{
		{"R4-k1-C4096", 1, []float64{1, 1, 1, 1}, 4096, 0},
		{"R4-k1-C4096-maxdelay50ms", 1, []float64{1, 1, 1, 1}, 4096, 50 * time.Millisecond},
		{"R4-k1-C17500", 1, []float64{1, 1, 1, 1}, 17500, 0},
		{"R4-k5-multibank-C87500", 5, []float64{0.01, 0.1, 0.5, 1}, 87500, 0},
	} {
		for _, withSample := range []bool{true, false} {
			name := tc.name
			if !withSample {
				name += "-nosample"
			}
			b.Run(name, func(b *testing.B) {
				c := config.DefaultCommon()
				c.Sketch.VLDA, c.Sketch.Sampling, c.Sketch.Columns = tc.vlda, tc.sampling, tc.cols
				if tc.maxDelay > 0 {
					c.MaxDelay = tc.maxDelay
				}
				p, err := capture.NewParser(c.CaptureConfig())
				if err != nil {
					b.Fatal(err)
				}
				// The whole default path: the lost-packet table too (lost.capacity).
				ip := interval.Params{T: int64(time.Second), MaxDelay: int64(c.MaxDelay), Guard: int64(c.Guard),
					Sketch: c.SketchParams(), LDA: c.LDAParams(), Classes: 1, Heavy: 1000, FlowCap: 1 << 20, LostCells: c.Lost.Cells()}
				sb, err := interval.NewSenderBuilder(ip, 0)
				if err != nil {
					b.Fatal(err)
				}
				pool := sample.NewPool(4)
				smp := sample.NewSampler(c.Sample, int64(time.Second), pool)
				frames := makeFrames(b, 4096, 20000)
				var pkt capture.Packet
				emit := func(si *interval.SenderInterval) { pool.Put(smp.Take(si.ID)); si.Release() } // as ship does after encoding
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
	// unique: mix the packet's number into its hash (pathOpt.unique).
	unique bool
}

func newPathPipe(b *testing.B, vlda, cols int, sampling []float64, withSample bool) *pathPipe {
	return newPathPipeOpt(b, pathOpt{vlda: vlda, cols: cols, sampling: sampling, sample: withSample})
}

// pathOpt configures a pathPipe.
type pathOpt struct {
	vlda     int
	cols     int
	sampling []float64
	sample   bool
	maxDelay time.Duration // 0: the default (config.DefaultCommon)
	// finish: the interval's boundary function is built (Finish) on the
	// same thread when it is emitted, as the ship goroutine does, so that
	// the thread's CPU is all the sender spends. Either way the interval
	// is released (its keys' storage back to the pool) once emitted.
	finish bool
	// window > 0: the receiver announced this hold window for every
	// boundary (a window table filled ahead), as a live receiver does;
	// 0: no receiver word, every boundary function covers max_delay.
	window time.Duration
	// unique: every packet gets its own hash (the frames repeat every
	// 4096 packets), so that a boundary function has as many keys as
	// packets in its window, as on real traffic.
	unique bool
}

func newPathPipeOpt(b *testing.B, o pathOpt) *pathPipe {
	c := config.DefaultCommon()
	c.Sketch.VLDA, c.Sketch.Sampling, c.Sketch.Columns = o.vlda, o.sampling, o.cols
	if o.maxDelay > 0 {
		c.MaxDelay = o.maxDelay
	}
	p, err := capture.NewParser(c.CaptureConfig())
	if err != nil {
		b.Fatal(err)
	}
	ip := interval.Params{T: int64(time.Second), MaxDelay: int64(c.MaxDelay), Guard: int64(c.Guard),
		Sketch: c.SketchParams(), LDA: c.LDAParams(), Classes: 1, Heavy: 1000, FlowCap: 1 << 20, LostCells: c.Lost.Cells()}
	var win *interval.WindowTable
	if o.window > 0 {
		win = interval.NewWindowTable()
		for bnd := range int64(8) {
			win.Set(interval.Window{Boundary: bnd, W: int64(o.window)})
		}
	}
	sb, err := interval.NewSenderBuilderWindows(ip, 0, win, 0)
	if err != nil {
		b.Fatal(err)
	}
	pp := &pathPipe{p: p, sb: sb, unique: o.unique}
	var pool *sample.Pool
	if o.sample {
		pool = sample.NewPool(4)
		pp.smp = sample.NewSampler(c.Sample, int64(time.Second), pool)
	}
	pp.emit = func(si *interval.SenderInterval) {
		if win != nil {
			win.Set(interval.Window{Boundary: si.ID + 8, W: int64(o.window)})
		}
		if pp.smp != nil {
			pool.Put(pp.smp.Take(si.ID)) // as ship does after selecting
		}
		if o.finish {
			if err := si.Finish(); err != nil {
				b.Fatal(err)
			}
		}
		si.Release()
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
		if pp.unique {
			pp.pkt.PktHash ^= uint64(pp.i>>12) * 0x9e3779b97f4a7c15
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

// BenchmarkPacketPathMaxDelayPaired: the cost of max_delay on the
// sender's packet path, on a loaded machine. Two identical paths (default
// sketch and sampler, every packet its own hash), one at the default
// max_delay (1s) and one at 50ms, take turns on chunks of 10⁶ packets
// (1 µs apart: one interval of event time, so that each path crosses one
// boundary, and does its boundary work once, in every chunk) in the same
// process, as BenchmarkPacketPathPaired does for the sampler. Reported:
// the medians of the per-pair ratios (1s / 50ms) of the thread's CPU
// ("ratio-cpu"), of the process's CPU ("ratio-proc", which adds what the
// runtime spends on other threads: the collector) and of wall time
// ("ratio-wall"), and the CPU per packet of each path. The first 4 pairs
// (warm-up: the log, the pools) are left out of the ratios. Variants:
//   - path: the capture goroutine's work only (the interval is handed on,
//     as the capture worker does), no receiver word: BenchmarkPacketPath's
//     setting;
//   - finish-rxwin50ms: plus the boundary function built and the interval
//     released on the same thread (the ship goroutine's share), the
//     receiver having announced 50 ms windows (a link of delays below
//     25 ms: what a live default receiver announces);
//   - finish-norxwin: the same without any receiver word, so that the
//     1s path's functions cover max_delay: 2 s of traffic per function
//     against 100 ms (more keys on the wire: the function is what the
//     receiver needs to place any packet it can hold).
//
// Run it long enough for many pairs: -benchtime=40000000x (36 pairs).
func BenchmarkPacketPathMaxDelayPaired(b *testing.B) {
	const chunk = 1_000_000
	frames := makeFrames(b, 4096, 20000)
	for _, tc := range []struct {
		name   string
		finish bool
		window time.Duration
	}{
		{"path", false, 0},
		{"finish-rxwin50ms", true, 50 * time.Millisecond},
		{"finish-norxwin", true, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := pathOpt{vlda: 1, cols: config.DefaultCommon().Sketch.Columns, sampling: []float64{1, 1, 1, 1}, sample: true,
				finish: tc.finish, window: tc.window, unique: true, maxDelay: time.Second}
			def := newPathPipeOpt(b, o)
			o.maxDelay = 50 * time.Millisecond
			short := newPathPipeOpt(b, o)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var ratios [3][]float64 // thread CPU, process CPU, wall
			var cpu, proc [2]int64
			measure := func(pp *pathPipe, n int) [3]int64 {
				c0, p0, w0 := testutil.ThreadCPU(), testutil.ProcessCPU(), time.Now()
				pp.run(b, frames, n)
				return [3]int64{testutil.ThreadCPU() - c0, testutil.ProcessCPU() - p0, time.Since(w0).Nanoseconds()}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				d, s := measure(def, n), measure(short, n)
				cpu[0], cpu[1], proc[0], proc[1] = cpu[0]+d[0], cpu[1]+s[0], proc[0]+d[1], proc[1]+s[1]
				if n == chunk && done >= 4*chunk && s[0] > 0 && s[1] > 0 {
					for k := range ratios {
						ratios[k] = append(ratios[k], float64(d[k])/float64(s[k]))
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpu[0])/float64(b.N), "cpu-ns/op-1s")
			b.ReportMetric(float64(cpu[1])/float64(b.N), "cpu-ns/op-50ms")
			b.ReportMetric(float64(proc[0])/float64(b.N), "proc-ns/op-1s")
			b.ReportMetric(float64(proc[1])/float64(b.N), "proc-ns/op-50ms")
			if len(ratios[0]) > 0 {
				b.ReportMetric(median(ratios[0]), "ratio-cpu")
				b.ReportMetric(median(ratios[1]), "ratio-proc")
				b.ReportMetric(median(ratios[2]), "ratio-wall")
				b.ReportMetric(float64(len(ratios[0])), "pairs")
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

// Buffered: the frames are all in memory, as a ring block's are.
func (m *memSource) Buffered() int                     { return m.n - m.i }
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
