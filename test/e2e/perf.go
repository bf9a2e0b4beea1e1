package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lds-net/lds/internal/capture"
)

// Live capture performance: a blaster pushes frames into a veth
// as fast as one core can, and the capture tools at the other end (tcpdump
// and the real lds-sender, with the same ring size) are compared by the
// kernel's own drop counters. See docs/testbed.md, "Live capture
// performance".
//
//	ns <prefix>-a                    ns <prefix>-b
//	blaster ─ pa ══════ veth ══════ pb   tcpdump -w /dev/null  |  lds-sender (workers 1, 2)
//	                                 lo   gRPC between them (plaintext, 127.0.0.1)
//	                                 rx0  lds-receiver's tap (a silent veth; PerfOptions.ReceiverTap)

// Interface names of the performance topology (inside its namespaces).
const (
	IfPerfSrc  = "pa"
	IfPerfSink = "pb"
	// IfPerfReceiver is one end of a veth pair inside the sink namespace, with
	// no address and nothing sent on it: the receiver's default tap
	// (PerfOptions.ReceiverTap).
	IfPerfReceiver = "rx0"
)

// PerfTopology is the two namespaces of the performance runs.
type PerfTopology struct{ Src, Sink string }

// NewPerfTopology creates prefix-a and prefix-b joined by the veth pa ══ pb.
// The sink has no address on pb: the frames' destination MAC is nobody's,
// so the sink's kernel drops them right after the taps (no replies).
func NewPerfTopology(prefix string) (_ *PerfTopology, err error) {
	t := &PerfTopology{Src: prefix + "-a", Sink: prefix + "-b"}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	for _, ns := range []string{t.Src, t.Sink} {
		if err := ip("netns", "add", ns); err != nil {
			return nil, err
		}
		// IPv6 off: no router solicitations or MLD reports on the tap.
		_ = exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1").Run()
	}
	steps := [][]string{
		{"-n", t.Src, "link", "add", IfPerfSrc, "type", "veth", "peer", "name", IfPerfSink, "netns", t.Sink},
		{"-n", t.Src, "addr", "add", SrcAddr.String() + "/24", "dev", IfPerfSrc},
		{"-n", t.Src, "link", "set", IfPerfSrc, "up"},
		{"-n", t.Sink, "link", "set", IfPerfSink, "up"},
		{"-n", t.Src, "link", "set", "lo", "up"},
		{"-n", t.Sink, "link", "set", "lo", "up"},
		{"-n", t.Sink, "link", "add", IfPerfReceiver, "type", "veth", "peer", "name", IfPerfReceiver + "p"},
		{"-n", t.Sink, "link", "set", IfPerfReceiver, "up"},
		{"-n", t.Sink, "link", "set", IfPerfReceiver + "p", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Close deletes both namespaces (and the veth with them).
func (t *PerfTopology) Close() error {
	var errs []error
	for _, ns := range []string{t.Src, t.Sink} {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Errorf("testbed: ip netns del %s: %w: %s", ns, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// PerfOptions of a live capture performance run.
type PerfOptions struct {
	BinDir  string // holds lds-sender and lds-receiver
	WorkDir string // configs and logs
	Prefix  string // namespace prefix, unique per run (e.g. ldsperf-<pid>)
	Blast   BlastConfig
	// Ring per capture socket: BlockSize × NumBlocks bytes for lds-sender
	// (per worker) and tcpdump -B (BlockSize×NumBlocks/1024 KiB).
	BlockSize, NumBlocks int
	Reps                 int   // repetitions of the whole trial list
	TcpdumpAlone         bool  // a trial with tcpdump alone
	Workers              []int // lds-sender worker counts to run alone
	// Concurrent adds a trial with tcpdump and lds-sender (workers 1) on
	// the interface at the same time, under one blast.
	Concurrent bool
	// MaxDelay sets max_delay on both daemons (0: the default, 1s): the
	// largest hold window, and so the most traffic a boundary function of
	// the sender covers (2·max_delay when the windows reach it, ReceiverTap).
	MaxDelay time.Duration
	// ReceiverTap is the interface lds-receiver taps ("": IfPerfReceiver). The
	// receiver only has to accept the stream; what it taps sets the hold
	// windows it announces, and so the traffic each of the sender's
	// boundary functions covers. On the silent IfPerfReceiver it has no delay
	// evidence and no surplus, so its windows stay at their minimum (50 ms:
	// a link of delays below 25 ms). On "lo" it sees the gRPC stream's own
	// packets, which the sender never saw: surplus cells, read as packets
	// misplaced by long delays, so its windows grow to max_delay (the
	// sender's worst case: functions over 2·max_delay of traffic).
	ReceiverTap string
	// LostCapacity, when set, is lost.capacity of both daemons (0: the
	// lost-packet table off), to tell its cost from the rest.
	LostCapacity *int
	// ToolCPUs, when set, is the CPU list (taskset -c) of tcpdump and
	// lds-sender: with Blast.CPUs apart from it, the captures run on
	// cores of their own, as on a monitoring host. lds-receiver, their
	// peer, then runs on Blast.CPUs.
	ToolCPUs string
	Log      *slog.Logger
}

// DefaultPerfOptions returns 5 s blasts at full speed, lds-sender's default ring
// (1 MiB × 64), 3 repetitions of tcpdump, lds w=1, lds w=2, both at once.
func DefaultPerfOptions() PerfOptions {
	return PerfOptions{Blast: DefaultBlast(), BlockSize: 1 << 20, NumBlocks: 64, Reps: 3, TcpdumpAlone: true, Workers: []int{1, 2}, Concurrent: true}
}

// Validate checks the options.
func (o PerfOptions) Validate() error {
	var errs []error
	if err := o.Blast.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.BlockSize < 4096 || o.BlockSize%4096 != 0 || o.NumBlocks < 1 {
		errs = append(errs, fmt.Errorf("perf ring: block size %d must be a multiple of 4096 and num_blocks %d >= 1", o.BlockSize, o.NumBlocks))
	}
	if o.BlockSize*o.NumBlocks%1024 != 0 {
		errs = append(errs, errors.New("perf ring: block_size × num_blocks must be whole KiB (tcpdump -B counts KiB)"))
	}
	if o.Reps < 1 {
		errs = append(errs, fmt.Errorf("perf reps: %d, want >= 1", o.Reps))
	}
	for _, w := range o.Workers {
		if w < 1 || w > 64 {
			errs = append(errs, fmt.Errorf("perf workers: %d outside 1..64", w))
		}
	}
	if len(o.specs()) == 0 {
		errs = append(errs, errors.New("perf: no trial (set TcpdumpAlone, Workers or Concurrent)"))
	}
	if o.Prefix == "" || o.BinDir == "" || o.WorkDir == "" {
		errs = append(errs, errors.New("perf: Prefix, BinDir and WorkDir are required"))
	}
	return errors.Join(errs...)
}

// CaptureCount is one capture tool's view of one trial.
type CaptureCount struct {
	Tool     string // "tcpdump" or "lds-sender w=N"
	Captured uint64 // packets the tool processed (tcpdump: "captured"; lds: lds_capture_packets_total)
	Kernel   uint64 // packets the kernel dropped for it (ring full)
	Seen     uint64 // packets the kernel offered its sockets (tcpdump: "received by filter"; lds: captured + kernel)
	// WorstInterval is the most kernel drops lds-sender exported in one
	// interval (its counters move once per interval): a burst from one
	// stall versus drops spread over the run. 0 for tcpdump.
	WorstInterval uint64
	// CPUSeconds is the tool's process CPU time (user + system) from
	// start to the counters' read: its cost per captured packet.
	CPUSeconds float64
	// BlastCPUSeconds is the part of it spent from just before the blast
	// until the rings have drained (1.5 s after it): the capture's cost
	// without the tool's start-up and idle time before the blast, which
	// at low packet rates weigh on CPUSeconds per packet (lds-sender
	// spends ~0.15 s in a trial of a few packets, start-up, intervals and
	// the trial's own metrics scrapes included).
	BlastCPUSeconds float64
}

// CPUNSPerPacket is the tool's CPU time per captured packet.
func (c CaptureCount) CPUNSPerPacket() float64 {
	if c.Captured == 0 {
		return 0
	}
	return c.CPUSeconds * 1e9 / float64(c.Captured)
}

// BlastCPUNSPerPacket is the tool's CPU time in the blast per captured packet.
func (c CaptureCount) BlastCPUNSPerPacket() float64 {
	if c.Captured == 0 {
		return 0
	}
	return c.BlastCPUSeconds * 1e9 / float64(c.Captured)
}

// DropRatio is Kernel / Seen.
func (c CaptureCount) DropRatio() float64 {
	if c.Seen == 0 {
		return 0
	}
	return float64(c.Kernel) / float64(c.Seen)
}

// PerfTrial is one blast with one or more capture tools on the sink.
type PerfTrial struct {
	Name    string
	Rep     int
	Blast   BlastStats
	Arrived uint64 // pb rx_packets: frames that reached the sink's receive path (the taps)
	Backlog uint64 // pa tx_dropped: frames the veth could not hand to the sink (per-CPU backlog full)
	Tools   []CaptureCount
}

// PerfResult is a whole run.
type PerfResult struct {
	Opt    PerfOptions
	Trials []PerfTrial
	Start  time.Time
}

// trialSpec says which tools a trial runs.
type trialSpec struct {
	name    string
	tcpdump bool
	workers int // 0: no lds-sender
}

func (o PerfOptions) specs() []trialSpec {
	var s []trialSpec
	if o.TcpdumpAlone {
		s = append(s, trialSpec{name: "tcpdump", tcpdump: true})
	}
	for _, w := range o.Workers {
		s = append(s, trialSpec{name: fmt.Sprintf("lds-sender w=%d", w), workers: w})
	}
	if o.Concurrent {
		s = append(s, trialSpec{name: "tcpdump + lds-sender w=1 (same time)", tcpdump: true, workers: 1})
	}
	return s
}

const (
	perfSenderMetrics = "127.0.0.1:9466"
	perfReceiverAddr  = "127.0.0.1:7421"
	perfRecvMetrics   = "127.0.0.1:9465"
)

// procsCPU reads the CPU seconds of tcpdump and lds-sender (0 for one not running).
func procsCPU(td, snd *proc) ([2]float64, error) {
	var out [2]float64
	for i, p := range []*proc{td, snd} {
		if p == nil {
			continue
		}
		v, err := procRunSeconds(p.cmd.Process.Pid)
		if err != nil {
			return out, err
		}
		out[i] = v
	}
	return out, nil
}

// RunPerf builds the topology, starts an lds-receiver on the sink's
// loopback (so that the sender runs its whole pipeline: sketches, merge,
// gRPC), and runs every trial Reps times, tools one after the other, each
// under its own blast. The namespaces are deleted before it returns.
func RunPerf(ctx context.Context, opt PerfOptions) (res *PerfResult, err error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, b := range []string{"lds-sender", "lds-receiver"} {
		if _, err := os.Stat(filepath.Join(opt.BinDir, b)); err != nil {
			return nil, fmt.Errorf("testbed: %s not built in %s: %w", b, opt.BinDir, err)
		}
	}
	if err := os.MkdirAll(opt.WorkDir, 0o755); err != nil {
		return nil, err
	}
	topo, err := NewPerfTopology(opt.Prefix)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, topo.Close()) }()
	res = &PerfResult{Opt: opt, Start: time.Now()}

	rCfg := filepath.Join(opt.WorkDir, "receiver.yaml")
	if err := writeYAML(rCfg, perfReceiverConfig(opt)); err != nil {
		return res, err
	}
	recv, err := startIn(topo.Sink, "lds-receiver", filepath.Join(opt.WorkDir, "lds-receiver.log"), opt.pinnedPeer(filepath.Join(opt.BinDir, "lds-receiver"), "--config", rCfg)...)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, recv.stop(10*time.Second)) }()
	for _, w := range opt.Workers {
		if err := writeYAML(perfSenderPath(opt, w), perfSenderConfig(opt, w)); err != nil {
			return res, err
		}
	}
	if opt.Concurrent {
		if err := writeYAML(perfSenderPath(opt, 1), perfSenderConfig(opt, 1)); err != nil {
			return res, err
		}
	}

	bl, err := NewBlaster(NetnsPath(topo.Src), IfPerfSrc, opt.Blast)
	if err != nil {
		return res, err
	}
	defer bl.Close()

	for rep := 1; rep <= opt.Reps; rep++ {
		for _, sp := range opt.specs() {
			if err := recv.exited(); err != nil {
				return res, err
			}
			tr, err := runTrial(ctx, opt, topo, bl, sp, rep, log)
			if err != nil {
				return res, fmt.Errorf("trial %q rep %d: %w", sp.name, rep, err)
			}
			log.Info("perf trial", "trial", tr.Name, "rep", rep, "offered_pps", int(tr.Blast.PPS()), "arrived", tr.Arrived, "tools", fmt.Sprintf("%+v", tr.Tools))
			res.Trials = append(res.Trials, tr)
		}
	}
	return res, nil
}

func perfSenderPath(opt PerfOptions, w int) string {
	return filepath.Join(opt.WorkDir, fmt.Sprintf("sender-w%d.yaml", w))
}

func perfCommon(opt PerfOptions, iface string, workers int, metrics string) map[string]any {
	src := map[string]any{"kind": "afpacket", "interface": iface}
	if workers > 0 {
		src["workers"] = workers
		src["block_size"] = opt.BlockSize
		src["num_blocks"] = opt.NumBlocks
	}
	m := map[string]any{
		"interval": "1s",
		"sketch":   map[string]any{"seed": "perf-seed"},
		"capture":  map[string]any{"source": src},
		"ptp":      map[string]any{"enabled": false},
		"metrics":  map[string]any{"listen": metrics},
		"log":      map[string]any{"level": "info"},
	}
	if opt.MaxDelay > 0 {
		m["max_delay"] = opt.MaxDelay.String()
	}
	if opt.LostCapacity != nil {
		m["lost"] = map[string]any{"capacity": *opt.LostCapacity}
	}
	return m
}

// perfSenderConfig: every packet measured (no select), the given ring and
// workers, plaintext gRPC to the receiver on loopback.
func perfSenderConfig(opt PerfOptions, workers int) map[string]any {
	m := perfCommon(opt, IfPerfSink, workers, perfSenderMetrics)
	m["sender"] = map[string]any{"id": "perf", "receiver": perfReceiverAddr, "tls": map[string]any{"plaintext": true}}
	return m
}

// perfReceiverConfig: the receiver only has to accept the stream; it taps
// opt.ReceiverTap (by default a silent veth, IfPerfReceiver).
func perfReceiverConfig(opt PerfOptions) map[string]any {
	m := perfCommon(opt, opt.rxTap(), 0, perfRecvMetrics)
	m["receiver"] = map[string]any{"listen": perfReceiverAddr, "tls": map[string]any{"plaintext": true},
		"senders": []map[string]any{{"id": "perf"}}, "lateness": "2s",
		"results_file": filepath.Join(opt.WorkDir, "receiver-results.jsonl")}
	return m
}

// runTrial starts the trial's tools on the sink, blasts, lets the rings
// drain, and reads every counter.
func runTrial(ctx context.Context, opt PerfOptions, topo *PerfTopology, bl *Blaster, sp trialSpec, rep int, log *slog.Logger) (PerfTrial, error) {
	tr := PerfTrial{Name: sp.name, Rep: rep}
	tag := fmt.Sprintf("r%d-%s", rep, strings.NewReplacer(" ", "", "=", "", "+", "-", "(", "", ")", "").Replace(sp.name))
	var td, snd *proc
	var err error
	defer func() {
		for _, p := range []*proc{td, snd} {
			if p != nil {
				_ = p.stop(10 * time.Second)
			}
		}
	}()
	if sp.tcpdump {
		kib := opt.BlockSize * opt.NumBlocks / 1024
		td, err = startIn(topo.Sink, "tcpdump", filepath.Join(opt.WorkDir, tag+"-tcpdump.log"),
			opt.pinned("tcpdump", "-n", "-i", IfPerfSink, "-B", strconv.Itoa(kib), "-Z", "root", "-w", "/dev/null")...)
		if err != nil {
			return tr, err
		}
		if err := td.waitLog("listening on", 10*time.Second); err != nil {
			return tr, err
		}
	}
	metricsURL := "http://" + perfSenderMetrics + "/metrics"
	if sp.workers > 0 {
		snd, err = startIn(topo.Sink, "lds-sender", filepath.Join(opt.WorkDir, tag+"-lds-sender.log"),
			opt.pinned(filepath.Join(opt.BinDir, "lds-sender"), "--config", perfSenderPath(opt, sp.workers))...)
		if err != nil {
			return tr, err
		}
		if err := waitSenderReady(ctx, topo, snd, metricsURL, sp.workers); err != nil {
			return tr, err
		}
	}
	time.Sleep(300 * time.Millisecond) // both sockets bound and idle
	before, err := vethCounters(topo)
	if err != nil {
		return tr, err
	}
	cpu0, err := procsCPU(td, snd)
	if err != nil {
		return tr, err
	}
	tr.Blast, err = bl.Run(ctx)
	if err != nil {
		return tr, err
	}
	// The rings drain; lds-sender's counters are read when an interval
	// closes (idle link: interval + 250 ms slack after the last packet).
	time.Sleep(1500 * time.Millisecond)
	after, err := vethCounters(topo)
	if err != nil {
		return tr, err
	}
	cpu1, err := procsCPU(td, snd)
	if err != nil {
		return tr, err
	}
	tr.Arrived = after.rx - before.rx
	tr.Backlog = after.txDropped - before.txDropped
	if snd != nil {
		c, err := scrapeSenderCounts(ctx, topo, metricsURL, snd, 15*time.Second)
		if err != nil {
			return tr, err
		}
		c.Tool = fmt.Sprintf("lds-sender w=%d", sp.workers)
		c.BlastCPUSeconds = cpu1[1] - cpu0[1]
		if c.WorstInterval, err = worstIntervalDrops(snd.log); err != nil {
			return tr, err
		}
		c.CPUSeconds, err = procCPUSeconds(snd.cmd.Process.Pid)
		if err != nil {
			return tr, err
		}
		tr.Tools = append(tr.Tools, c)
	}
	if td != nil {
		cpu, err := procCPUSeconds(td.cmd.Process.Pid)
		if err != nil {
			return tr, err
		}
		if err := td.stop(10 * time.Second); err != nil {
			return tr, err
		}
		c, err := parseTcpdumpStats(td.log)
		if err != nil {
			return tr, err
		}
		c.CPUSeconds, c.BlastCPUSeconds = cpu, cpu1[0]-cpu0[0]
		td = nil
		tr.Tools = append([]CaptureCount{c}, tr.Tools...)
	}
	return tr, nil
}

// worstIntervalDrops is the most kernel drops lds-sender logged for one
// interval (its WARN line a lossy interval). The log, not the metrics:
// polling /metrics during the blast (every 200 ms) made the trial's own
// scrapes a sizeable part of lds-sender's CPU at low packet rates, a cost
// no Prometheus at its usual 15 s adds.
func worstIntervalDrops(log string) (uint64, error) {
	b, err := os.ReadFile(log)
	if err != nil {
		return 0, fmt.Errorf("lds-sender's log: %w", err)
	}
	var worst uint64
	for _, m := range dropLine.FindAllSubmatch(b, -1) {
		n, err := strconv.ParseUint(string(m[1]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("lds-sender's log: %q: %w", m[0], err)
		}
		worst = max(worst, n)
	}
	return worst, nil
}

// dropLine is lds-sender's WARN line for an interval whose capture
// dropped packets, its kernel count captured.
var dropLine = regexp.MustCompile(`msg="the capture dropped packets[^"]*".* kernel=(\d+)`)

// waitSenderReady waits until lds-sender has opened its workers' sockets
// and serves metrics.
func waitSenderReady(ctx context.Context, topo *PerfTopology, snd *proc, url string, workers int) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if err := snd.exited(); err != nil {
			return err
		}
		b, _ := os.ReadFile(snd.log)
		if strings.Count(string(b), "afpacket source open") >= workers {
			if _, err := httpGetIn(ctx, NetnsPath(topo.Sink), url); err == nil {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("testbed: lds-sender not ready within 15s; log %s:\n%s", snd.log, tail(snd.log, 2000))
}

// scrapeSenderCounts polls lds-sender's metrics until the capture counters
// stop moving (the last interval with traffic has been closed and
// exported).
func scrapeSenderCounts(ctx context.Context, topo *PerfTopology, url string, snd *proc, timeout time.Duration) (CaptureCount, error) {
	deadline := time.Now().Add(timeout)
	var last CaptureCount
	same := 0
	for time.Now().Before(deadline) {
		if err := snd.exited(); err != nil {
			return last, err
		}
		body, err := httpGetIn(ctx, NetnsPath(topo.Sink), url)
		if err == nil {
			c, ok := senderCounts(body)
			if ok && c.Captured == last.Captured && c.Kernel == last.Kernel && c.Captured+c.Kernel > 0 {
				same++
				if same >= 2 {
					return c, nil
				}
			} else {
				same = 0
			}
			last = c
		}
		time.Sleep(700 * time.Millisecond)
	}
	return last, fmt.Errorf("testbed: lds-sender's capture counters did not settle within %v (last %+v); log %s", timeout, last, snd.log)
}

// senderCounts reads lds_capture_packets_total and
// lds_capture_drops_total{reason="kernel"} from an exposition body.
func senderCounts(body string) (CaptureCount, bool) {
	var c CaptureCount
	var havePk, haveK bool
	for _, l := range strings.Split(body, "\n") {
		name, val, ok := strings.Cut(l, " ")
		if !ok || strings.HasPrefix(l, "#") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "lds_capture_packets_total":
			c.Captured, havePk = uint64(v), true
		case `lds_capture_drops_total{reason="kernel"}`:
			c.Kernel, haveK = uint64(v), true
		}
	}
	c.Seen = c.Captured + c.Kernel
	return c, havePk && haveK
}

var tcpdumpStatRe = regexp.MustCompile(`(?m)^(\d+) packets? (captured|received by filter|dropped by kernel)$`)

// parseTcpdumpStats reads the three counter lines tcpdump prints at exit.
func parseTcpdumpStats(logPath string) (CaptureCount, error) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return CaptureCount{}, err
	}
	c, n := parseTcpdumpText(string(b))
	if n != 3 {
		return c, fmt.Errorf("testbed: tcpdump's exit counters not found in %s:\n%s", logPath, tail(logPath, 1000))
	}
	return c, nil
}

func parseTcpdumpText(s string) (CaptureCount, int) {
	c := CaptureCount{Tool: "tcpdump"}
	n := 0
	for _, m := range tcpdumpStatRe.FindAllStringSubmatch(s, -1) {
		v, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			continue
		}
		n++
		switch m[2] {
		case "captured":
			c.Captured = v
		case "received by filter":
			c.Seen = v
		case "dropped by kernel":
			c.Kernel = v
		}
	}
	return c, n
}

// procCPUSeconds reads a process's user + system CPU time from
// /proc/PID/stat (ip netns exec execs the program in place, so the pid is
// the tool's own).
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("testbed: CPU time of pid %d: %w", pid, err)
	}
	return parseProcStatCPU(string(b))
}

// procRunSeconds is a process's time on a CPU to the nanosecond: the sum
// of its threads' /proc/PID/task/TID/schedstat (the scheduler's own
// clock, where /proc/PID/stat counts in 10 ms ticks: ±10 ms is ±5 % of
// tcpdump's CPU in a 5 s blast). A thread that exited takes its time with
// it, so it serves differences over a window in which the tool's threads
// live on (Go keeps its threads; tcpdump has one). Without schedstat
// (a kernel without CONFIG_SCHED_INFO) it falls back to procCPUSeconds.
func procRunSeconds(pid int) (float64, error) {
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, fmt.Errorf("testbed: threads of pid %d: %w", pid, err)
	}
	var ns uint64
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, tid.Name()))
		if errors.Is(err, fs.ErrNotExist) && ns == 0 {
			return procCPUSeconds(pid)
		}
		if err != nil {
			continue // the thread exited since the listing
		}
		v, err := parseSchedstat(string(b))
		if err != nil {
			return 0, err
		}
		ns += v
	}
	return float64(ns) / 1e9, nil
}

// parseSchedstat returns the first field of a schedstat line: ns on a CPU.
func parseSchedstat(line string) (uint64, error) {
	f := strings.Fields(line)
	if len(f) < 1 {
		return 0, fmt.Errorf("testbed: empty schedstat line")
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("testbed: schedstat line %q: %w", line, err)
	}
	return v, nil
}

// parseProcStatCPU returns (utime + stime) / USER_HZ from a stat line.
// Fields are counted after the command name's closing parenthesis (the
// name may hold spaces).
func parseProcStatCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("testbed: malformed /proc stat line %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// After ')': state is field 3; utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("testbed: short /proc stat line %q", stat)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("testbed: /proc stat times: %w", err)
	}
	const userHZ = 100 // USER_HZ is 100 on every Linux ABI Go supports
	return float64(u+s) / userHZ, nil
}

type vethStats struct{ rx, txDropped uint64 }

// vethCounters reads pb's rx_packets and pa's tx_dropped.
func vethCounters(t *PerfTopology) (vethStats, error) {
	var s vethStats
	read := func(ns, dev string) (map[string]map[string]uint64, error) {
		out, err := exec.Command("ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev).Output()
		if err != nil {
			return nil, fmt.Errorf("testbed: ip -n %s -s -j link show %s: %w", ns, dev, err)
		}
		var v []struct {
			Stats64 map[string]map[string]uint64 `json:"stats64"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			return nil, fmt.Errorf("testbed: no stats64 for %s in %s: %w: %s", dev, ns, err, out)
		}
		if len(v) != 1 || v[0].Stats64 == nil {
			return nil, fmt.Errorf("testbed: no stats64 for %s in %s: %s", dev, ns, out)
		}
		return v[0].Stats64, nil
	}
	sink, err := read(t.Sink, IfPerfSink)
	if err != nil {
		return s, err
	}
	src, err := read(t.Src, IfPerfSrc)
	if err != nil {
		return s, err
	}
	s.rx, s.txDropped = sink["rx"]["packets"], src["tx"]["dropped"]
	return s, nil
}

func (o PerfOptions) rxTap() string {
	if o.ReceiverTap == "" {
		return IfPerfReceiver
	}
	return o.ReceiverTap
}

// WriteMarkdown writes the trials as tables: every trial, then the per
// tool summary over repetitions.
func (r *PerfResult) WriteMarkdown(w *bufio.Writer) error {
	o := r.Opt
	md := "1s (default)"
	if o.MaxDelay > 0 {
		md = o.MaxDelay.String()
	}
	lbs, lnb := capture.RingGeometry(o.BlockSize, o.NumBlocks)
	fmt.Fprintf(w, "Blast: %d flows of %d-byte UDP frames, %s per trial, %d sending thread(s), %s; ring per socket %d blocks × %d KiB = %d KiB (tcpdump -B %d: libpcap uses 256 KiB blocks; lds-sender configured %d × %d KiB, asks the kernel for %d × %d KiB); lds max_delay %s; lds-receiver taps %s (%s); %d repetition(s), trials in the order listed.\n\n",
		o.Blast.Flows, 42+o.Blast.Payload, o.Blast.Duration, o.Blast.Threads, rateText(o.Blast.PPS, o.Blast.Threads), o.NumBlocks, o.BlockSize>>10, o.BlockSize*o.NumBlocks>>10,
		o.BlockSize*o.NumBlocks/1024, o.NumBlocks, o.BlockSize>>10, lnb, lbs>>10, md, o.rxTap(), rxTapText(o.rxTap()), o.Reps)
	fmt.Fprintln(w, placementText(o))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "*CPU* is the tool's process CPU from start to the counters' read; *blast CPU* only from just before the blast until the rings drained (1.5 s after it), without start-up and idle time, from the threads' schedstat (ns; *CPU* counts 10 ms ticks).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| rep | trial | sent | offered pps | arrived at pb | backlog drops | tool | captured | kernel drops | drop ratio | worst interval | CPU s | CPU ns/pkt | blast CPU s | blast CPU ns/pkt |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, t := range r.Trials {
		for i, c := range t.Tools {
			if i == 0 {
				fmt.Fprintf(w, "| %d | %s | %d | %.0f | %d | %d ", t.Rep, t.Name, t.Blast.Sent, t.Blast.PPS(), t.Arrived, t.Backlog)
			} else {
				fmt.Fprint(w, "| | | | | | ")
			}
			worst := "–"
			if strings.HasPrefix(c.Tool, "lds") {
				worst = strconv.FormatUint(c.WorstInterval, 10)
			}
			fmt.Fprintf(w, "| %s | %d | %d | %.2f%% | %s | %.2f | %.0f | %.2f | %.0f |\n", c.Tool, c.Captured, c.Kernel, 100*c.DropRatio(), worst,
				c.CPUSeconds, c.CPUNSPerPacket(), c.BlastCPUSeconds, c.BlastCPUNSPerPacket())
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Summary (sums over repetitions; captured per second of blast):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| trial | tool | arrived | captured | kernel drops | drop ratio | captured pps | CPU ns/pkt | blast CPU ns/pkt |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range r.Summary() {
		c := CaptureCount{Captured: s.Captured, CPUSeconds: s.CPUSeconds, BlastCPUSeconds: s.BlastCPUSeconds}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %.2f%% | %.0f | %.0f | %.0f |\n", s.Trial, s.Tool, s.Arrived, s.Captured, s.Kernel, 100*s.DropRatio(), s.CapturedPPS,
			c.CPUNSPerPacket(), c.BlastCPUNSPerPacket())
	}
	return w.Flush()
}

func rxTapText(tap string) string {
	switch tap {
	case IfPerfReceiver:
		return "silent: its hold windows stay at 50 ms, the sender's functions cover ~100 ms of traffic"
	case "lo":
		return "the gRPC stream's packets, which the sender never saw: its windows grow to max_delay, the sender's functions cover ~2·max_delay of traffic"
	}
	return "windows as its traffic makes them"
}

func rateText(pps, threads int) string {
	if pps == 0 {
		return fmt.Sprintf("as fast as %d thread(s) can send", threads)
	}
	return fmt.Sprintf("paced at %d packets/s", pps)
}

// PerfSummary totals one tool in one kind of trial over the repetitions.
type PerfSummary struct {
	Trial, Tool                     string
	Arrived, Captured, Kernel, Seen uint64
	CapturedPPS, CPUSeconds         float64
	BlastCPUSeconds                 float64
}

// DropRatio is Kernel / Seen.
func (s PerfSummary) DropRatio() float64 {
	return CaptureCount{Kernel: s.Kernel, Seen: s.Seen}.DropRatio()
}

// Summary totals each (trial, tool) over the repetitions, in trial order.
func (r *PerfResult) Summary() []PerfSummary {
	var out []PerfSummary
	idx := map[[2]string]int{}
	secs := map[[2]string]float64{}
	for _, t := range r.Trials {
		for _, c := range t.Tools {
			k := [2]string{t.Name, c.Tool}
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				out = append(out, PerfSummary{Trial: t.Name, Tool: c.Tool})
			}
			s := &out[i]
			s.Arrived += t.Arrived
			s.Captured += c.Captured
			s.Kernel += c.Kernel
			s.Seen += c.Seen
			s.CPUSeconds += c.CPUSeconds
			s.BlastCPUSeconds += c.BlastCPUSeconds
			secs[k] += t.Blast.Elapsed.Seconds()
		}
	}
	for i := range out {
		if d := secs[[2]string{out[i].Trial, out[i].Tool}]; d > 0 {
			out[i].CapturedPPS = float64(out[i].Captured) / d
		}
	}
	return out
}

// pinned prefixes argv with taskset when ToolCPUs is set.
func (o PerfOptions) pinned(argv ...string) []string {
	if o.ToolCPUs == "" {
		return argv
	}
	return append([]string{"taskset", "-c", o.ToolCPUs}, argv...)
}

// pinnedPeer prefixes argv with taskset on the blaster's CPUs when
// ToolCPUs is set: lds-receiver stays off the captures' cores.
func (o PerfOptions) pinnedPeer(argv ...string) []string {
	if o.ToolCPUs == "" || len(o.Blast.CPUs) == 0 {
		return argv
	}
	cpus := make([]string, len(o.Blast.CPUs))
	for i, c := range o.Blast.CPUs {
		cpus[i] = strconv.Itoa(c)
	}
	return append([]string{"taskset", "-c", strings.Join(cpus, ",")}, argv...)
}

// placementText says where the run put the blaster and the tools.
func placementText(o PerfOptions) string {
	if o.ToolCPUs == "" || len(o.Blast.CPUs) == 0 {
		return "Placement: the scheduler's (LDS_PERF_PIN=off): a capture may share the blaster's core, and its CPU a packet moves with where it lands."
	}
	return fmt.Sprintf("Placement: blaster thread(s) and lds-receiver on CPU %v, tcpdump and lds-sender on CPU %s (LDS_PERF_PIN): every capture reads its ring from another core than the one that filled it, run after run.",
		o.Blast.CPUs, o.ToolCPUs)
}

// ParsePin reads LDS_PERF_PIN: BLASTER_CPUS:TOOL_CPUS (e.g. 0:1; each a
// comma list), or "" or "off" for the scheduler's placement.
func ParsePin(v string) (blaster []int, tools string, err error) {
	if v == "" || v == "off" {
		return nil, "", nil
	}
	b, tools, ok := strings.Cut(v, ":")
	if !ok || b == "" || tools == "" {
		return nil, "", fmt.Errorf("LDS_PERF_PIN=%q: want BLASTER_CPUS:TOOL_CPUS, e.g. 0:1, or off", v)
	}
	for _, f := range strings.Split(b, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, "", fmt.Errorf("LDS_PERF_PIN=%q: %q is not a CPU number", v, f)
		}
		blaster = append(blaster, n)
	}
	return blaster, tools, nil
}
