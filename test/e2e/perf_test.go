package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// TestBlastFrames decodes the blaster's frames with gopacket (independent
// of the code that built them): valid IPv4 checksum, the configured
// addresses and sizes, one source port per flow, and a counter that makes
// every frame of a run unique.
func TestBlastFrames(t *testing.T) {
	c := DefaultBlast()
	c.Flows, c.Batch, c.Payload = 100, 64, 40
	dmac, _ := net.ParseMAC(c.DstMAC)
	smac, _ := net.ParseMAC("02:00:00:00:00:01")
	b := &blastSock{c: c, flen: 42 + c.Payload}
	b.tmpl = make([]byte, c.Flows*b.flen)
	for f := range c.Flows {
		buildBlastFrame(b.tmpl[f*b.flen:(f+1)*b.flen], dmac, smac, uint16(10000+f), c.Payload)
	}
	b.order = make([]uint16, c.Flows)
	for i := range b.order {
		b.order[i] = uint16((i * 7) % c.Flows)
	}
	b.frames = make([]byte, c.Batch*b.flen)
	ports := map[uint16]int{}
	counters := map[uint64]bool{}
	for range 4 { // 256 frames: every flow at least twice
		b.fill()
		for i := range c.Batch {
			fr := b.frames[i*b.flen : (i+1)*b.flen]
			p := gopacket.NewPacket(fr, layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("frame %d does not decode: %v", i, el.Error())
			}
			eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			ip4, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if eth == nil || ip4 == nil || udp == nil {
				t.Fatalf("frame %d: want Ethernet/IPv4/UDP, got %v", i, p.Layers())
			}
			if eth.DstMAC.String() != dmac.String() || eth.SrcMAC.String() != smac.String() {
				t.Fatalf("MACs %v -> %v", eth.SrcMAC, eth.DstMAC)
			}
			if ip4.SrcIP.String() != SrcAddr.String() || ip4.DstIP.String() != DstAddr.String() || int(ip4.Length) != 28+c.Payload {
				t.Fatalf("IPv4 header %v -> %v len %d", ip4.SrcIP, ip4.DstIP, ip4.Length)
			}
			// Recompute the checksum independently: one's complement sum
			// over the header including the checksum field must be 0xffff.
			var sum uint32
			for j := 0; j < 20; j += 2 {
				sum += uint32(binary.BigEndian.Uint16(fr[14+j:]))
			}
			for sum>>16 != 0 {
				sum = sum&0xffff + sum>>16
			}
			if sum != 0xffff {
				t.Fatalf("frame %d: IPv4 checksum does not verify (sum %#x)", i, sum)
			}
			if int(udp.Length) != 8+c.Payload || udp.DstPort != 9 || udp.SrcPort < 10000 || int(udp.SrcPort) >= 10000+c.Flows {
				t.Fatalf("UDP header %+v", udp)
			}
			ports[uint16(udp.SrcPort)]++
			k := binary.BigEndian.Uint64(udp.Payload)
			if counters[k] {
				t.Fatalf("counter %d repeated: identities must be unique", k)
			}
			counters[k] = true
		}
	}
	if len(ports) != c.Flows {
		t.Fatalf("%d distinct flows in 256 frames, want %d", len(ports), c.Flows)
	}
	if a := testing.AllocsPerRun(100, b.fill); a != 0 {
		t.Fatalf("fill allocates %.1f per batch, want 0", a)
	}
}

func TestBlastConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*BlastConfig)
		bad  string
	}{
		{"default", func(*BlastConfig) {}, ""},
		{"no flows", func(c *BlastConfig) { c.Flows = 0 }, "blast.flows"},
		{"short payload", func(c *BlastConfig) { c.Payload = 4 }, "blast.payload"},
		{"negative pps", func(c *BlastConfig) { c.PPS = -1 }, "blast.pps"},
		{"no duration", func(c *BlastConfig) { c.Duration = 0 }, "blast.duration"},
		{"big batch", func(c *BlastConfig) { c.Batch = 5000 }, "blast.batch"},
		{"no threads", func(c *BlastConfig) { c.Threads = 0 }, "blast.threads"},
		{"bad mac", func(c *BlastConfig) { c.DstMAC = "nope" }, "blast.dst_mac"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultBlast()
			tc.mod(&c)
			err := c.Validate()
			if tc.bad == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)) {
				t.Fatalf("error %v, want one naming %s", err, tc.bad)
			}
		})
	}
}

func TestPerfOptionsValidate(t *testing.T) {
	ok := DefaultPerfOptions()
	ok.BinDir, ok.WorkDir, ok.Prefix = "/b", "/w", "p"
	for _, tc := range []struct {
		name string
		mod  func(*PerfOptions)
		bad  string
	}{
		{"default", func(*PerfOptions) {}, ""},
		{"odd block", func(o *PerfOptions) { o.BlockSize = 5000 }, "block size"},
		{"no reps", func(o *PerfOptions) { o.Reps = 0 }, "reps"},
		{"bad workers", func(o *PerfOptions) { o.Workers = []int{0} }, "workers"},
		{"no trial", func(o *PerfOptions) { o.TcpdumpAlone, o.Workers, o.Concurrent = false, nil, false }, "no trial"},
		{"no prefix", func(o *PerfOptions) { o.Prefix = "" }, "required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.mod(&o)
			err := o.Validate()
			if tc.bad == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)) {
				t.Fatalf("error %v, want one naming %q", err, tc.bad)
			}
		})
	}
}

func TestParseCounters(t *testing.T) {
	td := "tcpdump: listening on pb, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n" +
		"4711 packets captured\n5000 packets received by filter\n289 packets dropped by kernel\n"
	c, n := parseTcpdumpText(td)
	if n != 3 || c.Captured != 4711 || c.Seen != 5000 || c.Kernel != 289 {
		t.Fatalf("tcpdump counters %+v (%d lines)", c, n)
	}
	if _, n := parseTcpdumpText("tcpdump: listening on pb\n"); n != 0 {
		t.Fatalf("found %d counter lines in a log without any", n)
	}
	body := "# HELP lds_capture_packets_total x\n# TYPE lds_capture_packets_total counter\nlds_capture_packets_total 1.234567e+06\n" +
		"lds_capture_drops_total{reason=\"interface\"} 7\nlds_capture_drops_total{reason=\"kernel\"} 4321\n"
	s, ok := senderCounts(body)
	if !ok || s.Captured != 1234567 || s.Kernel != 4321 || s.Seen != 1234567+4321 {
		t.Fatalf("sender counters %+v ok=%v", s, ok)
	}
	if _, ok := senderCounts("lds_capture_packets_total 5\n"); ok {
		t.Fatal("counters reported complete without the kernel drop series")
	}
	// A command name with spaces and a parenthesis must not shift fields.
	stat := "4242 (lds (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 8 0 100 0 0"
	if cpu, err := parseProcStatCPU(stat); err != nil || cpu != 3.25 {
		t.Fatalf("CPU from %q: %v, %v; want 3.25 s", stat, cpu, err)
	}
	if _, err := parseProcStatCPU("4242 (x) S 1"); err == nil {
		t.Fatal("short stat line accepted")
	}
	if ns, err := parseSchedstat("1234567890 4567 89\n"); err != nil || ns != 1234567890 {
		t.Fatalf("schedstat: %v, %v; want 1234567890 ns", ns, err)
	}
	for _, bad := range []string{"", "x 1 2"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Fatalf("schedstat %q accepted", bad)
		}
	}
	// Our threads' run time grows by what the kernel charges us for CPU
	// (getrusage), whatever the wall clock does meanwhile.
	r0, err := procRunSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for u0 := rusageSeconds(t); rusageSeconds(t)-u0 < 0.02; {
		_ = os.Getpid()
	}
	if r1, err := procRunSeconds(os.Getpid()); err != nil || r1-r0 < 0.015 {
		t.Fatalf("own run time grew by %v s (%v) over 20 ms of CPU; want ≥ 15 ms", r1-r0, err)
	}
	if cpu, err := procCPUSeconds(os.Getpid()); err != nil || cpu < 0 {
		t.Fatalf("own CPU time: %v, %v", cpu, err)
	}
}

// needPerf skips (or fails under LDS_E2E_REQUIRED=1) when the live
// performance run cannot run here.
func needPerf(t *testing.T) {
	t.Helper()
	why := ""
	required := os.Getenv("LDS_E2E_REQUIRED") == "1"
	switch {
	case os.Geteuid() != 0:
		why = "needs root (network namespaces, veth, AF_PACKET)"
	case testing.Short() && !required:
		t.Skip("SKIPPED: live capture performance run skipped in -short mode (~6 s plus building the daemons)")
	default:
		for _, tool := range []string{"ip", "tcpdump"} {
			if _, err := exec.LookPath(tool); err != nil {
				why = "needs " + tool + " (apt-get install iproute2 tcpdump)"
			}
		}
	}
	if why == "" {
		return
	}
	if required {
		t.Fatalf("LDS_E2E_REQUIRED=1 but the live capture performance run %s", why)
	}
	t.Skipf("SKIPPED: live capture performance run %s", why)
}

func perfRun(t *testing.T, opt PerfOptions) *PerfResult {
	t.Helper()
	opt.BinDir, opt.WorkDir, opt.Prefix, opt.Log = prepareRun(t, "LDS_PERF_DIR", "LDS_PERF_PREFIX", fmt.Sprintf("ldsperf-%d", os.Getpid()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	res, err := RunPerf(ctx, opt)
	if err != nil {
		t.Fatalf("perf run (files in %s): %v", opt.WorkDir, err)
	}
	var sb strings.Builder
	w := bufio.NewWriter(&sb)
	if err := res.WriteMarkdown(w); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", sb.String())
	if p := os.Getenv("LDS_PERF_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

// TestLivePerfSmoke is a short version of scripts/bench-live.sh: one 1 s
// blast with tcpdump and lds-sender on the same veth at the same time. It
// asserts sanity only (both captured packets, counters were read and are
// consistent with what reached the interface); the measurement is the
// script's.
func TestLivePerfSmoke(t *testing.T) {
	needPerf(t)
	opt := DefaultPerfOptions()
	opt.Blast.Duration = time.Second
	opt.Reps, opt.TcpdumpAlone, opt.Workers, opt.Concurrent = 1, false, nil, true
	res := perfRun(t, opt)
	if len(res.Trials) != 1 || len(res.Trials[0].Tools) != 2 {
		t.Fatalf("want one trial with two tools, got %+v", res.Trials)
	}
	tr := res.Trials[0]
	if tr.Blast.Sent == 0 || tr.Arrived == 0 {
		t.Fatalf("no traffic: blaster %+v, %d frames arrived at %s", tr.Blast, tr.Arrived, IfPerfSink)
	}
	if tr.Arrived > tr.Blast.Sent {
		t.Fatalf("%d frames arrived at %s, more than the %d sent: something else talks on the link", tr.Arrived, IfPerfSink, tr.Blast.Sent)
	}
	for _, c := range tr.Tools {
		if c.Captured == 0 {
			t.Errorf("%s captured nothing: %+v", c.Tool, c)
		}
		// Each socket sees every arrived frame once: captured + dropped
		// cannot exceed what reached the interface.
		if c.Captured+c.Kernel > tr.Arrived {
			t.Errorf("%s: captured %d + kernel drops %d > %d frames that arrived", c.Tool, c.Captured, c.Kernel, tr.Arrived)
		}
	}
}

// TestLivePerfBench is the measurement of scripts/bench-live.sh
// (LDS_PERF_BENCH=1). Knobs: LDS_PERF_SECONDS, LDS_PERF_REPS, LDS_PERF_PPS
// (0 = full speed), LDS_PERF_BLOCK_SIZE, LDS_PERF_NUM_BLOCKS,
// LDS_PERF_WORKERS ("1,2"), LDS_PERF_FLOWS, LDS_PERF_PAYLOAD,
// LDS_PERF_THREADS (blaster threads), LDS_PERF_MAX_DELAY (e.g. 2ms),
// LDS_PERF_TRIALS (comma list of tcpdump, lds, both), LDS_PERF_RX_TAP
// (the receiver's tap: rx0, silent, by default; lo for windows at
// max_delay, PerfOptions.ReceiverTap), LDS_PERF_LOST_CAPACITY (lost.capacity of
// both daemons; 0: the lost-packet table off), LDS_PERF_PIN (ParsePin:
// BLASTER_CPUS:TOOL_CPUS, e.g. 0:1; unset or off: the scheduler's).
func TestLivePerfBench(t *testing.T) {
	if os.Getenv("LDS_PERF_BENCH") != "1" {
		t.Skip("SKIPPED: the live capture measurement needs LDS_PERF_BENCH=1 (scripts/bench-live.sh sets it)")
	}
	needPerf(t)
	opt := DefaultPerfOptions()
	secs := 5
	for env, p := range map[string]*int{"LDS_PERF_SECONDS": &secs, "LDS_PERF_REPS": &opt.Reps, "LDS_PERF_PPS": &opt.Blast.PPS,
		"LDS_PERF_BLOCK_SIZE": &opt.BlockSize, "LDS_PERF_NUM_BLOCKS": &opt.NumBlocks, "LDS_PERF_FLOWS": &opt.Blast.Flows,
		"LDS_PERF_PAYLOAD": &opt.Blast.Payload, "LDS_PERF_THREADS": &opt.Blast.Threads} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s=%q: %v", env, v, err)
			}
			*p = n
		}
	}
	opt.Blast.Duration = time.Duration(secs) * time.Second
	if v := os.Getenv("LDS_PERF_MAX_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LDS_PERF_MAX_DELAY=%q: %v", v, err)
		}
		opt.MaxDelay = d
	}
	opt.ReceiverTap = os.Getenv("LDS_PERF_RX_TAP")
	var err error
	if opt.Blast.CPUs, opt.ToolCPUs, err = ParsePin(os.Getenv("LDS_PERF_PIN")); err != nil {
		t.Fatal(err)
	}
	if v := os.Getenv("LDS_PERF_LOST_CAPACITY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("LDS_PERF_LOST_CAPACITY=%q: %v", v, err)
		}
		opt.LostCapacity = &n
	}
	if v := os.Getenv("LDS_PERF_TRIALS"); v != "" {
		// A comma list of: tcpdump, lds, both.
		opt.TcpdumpAlone, opt.Concurrent = strings.Contains(v, "tcpdump"), strings.Contains(v, "both")
		if !strings.Contains(v, "lds") {
			opt.Workers = nil
		}
	}
	if v := os.Getenv("LDS_PERF_WORKERS"); v != "" {
		opt.Workers = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("LDS_PERF_WORKERS=%q: %v", v, err)
			}
			opt.Workers = append(opt.Workers, n)
		}
	}
	res := perfRun(t, opt)
	for _, tr := range res.Trials {
		for _, c := range tr.Tools {
			if c.Captured == 0 {
				t.Errorf("rep %d %s: %s captured nothing", tr.Rep, tr.Name, c.Tool)
			}
		}
	}
}

func TestParsePin(t *testing.T) {
	for _, tc := range []struct {
		in      string
		blaster []int
		tools   string
		bad     bool
	}{
		{in: ""},
		{in: "off"},
		{in: "0:1", blaster: []int{0}, tools: "1"},
		{in: "0,2:1,3", blaster: []int{0, 2}, tools: "1,3"},
		{in: "0", bad: true},
		{in: ":1", bad: true},
		{in: "0:", bad: true},
		{in: "x:1", bad: true},
		{in: "-1:1", bad: true},
	} {
		b, tools, err := ParsePin(tc.in)
		if (err != nil) != tc.bad || !slices.Equal(b, tc.blaster) || tools != tc.tools {
			t.Errorf("ParsePin(%q) = %v, %q, %v; want %v, %q, error %v", tc.in, b, tools, err, tc.blaster, tc.tools, tc.bad)
		}
	}
}

// rusageSeconds is this process's user + system CPU time (getrusage).
func rusageSeconds(t *testing.T) float64 {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
