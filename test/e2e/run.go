package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/eval"
	"github.com/lds-net/lds/tools/join"
	"github.com/lds-net/lds/tools/linkem"
	"github.com/lds-net/lds/tools/truth"
)

// Options of one testbed run.
type Options struct {
	BinDir    string // holds lds-sender, lds-receiver and lds-linkem
	WorkDir   string // configs, certificates, captures, logs, results
	Prefix    string // namespace name prefix; unique per run (e.g. ldstb-<pid>)
	Interval  time.Duration
	Intervals int // traffic runs for this many whole intervals
	Traffic   TrafficConfig
	// Forward is the emulated link from src to dst (the reverse passes at once).
	Forward linkem.Profile
	Columns int    // sketch.columns (0: the default)
	VLDA    int    // sketch.vlda (0: the default)
	Seed    string // sketch.seed
	Log     *slog.Logger
}

// DefaultLink is the small test's link: UDP on a bimodal path with
// uniform loss, TCP with Pareto-tail jitter and bursty (Gilbert–Elliott)
// loss; per-packet delays reorder packets as parallel paths would.
func DefaultLink() linkem.Profile {
	us := time.Microsecond
	return linkem.Profile{Classes: []linkem.Class{
		{Name: "udp", Match: match.Rule{Proto: []int{17}},
			Delay: linkem.Delay{Kind: "bimodal", P: 0.7, A: 800 * us, B: 3 * time.Millisecond, Spread: 400 * us},
			Loss:  linkem.Loss{Kind: "uniform", P: 0.005}},
		{Name: "tcp", Match: match.Rule{Proto: []int{6}},
			Delay: linkem.Delay{Kind: "pareto", Base: 2 * time.Millisecond, Scale: 150 * us, Shape: 2.5, Cap: 8 * time.Millisecond},
			Loss:  linkem.Loss{Kind: "gilbert", PGB: 0.002, PBG: 0.25, LossBad: 0.5}},
	}}
}

// DefaultOptions returns 4 intervals of 1 s at 3000 packets/s over DefaultLink.
func DefaultOptions() Options {
	return Options{Interval: time.Second, Intervals: 4, Traffic: DefaultTraffic(), Forward: DefaultLink(),
		Seed: "testbed-seed"}
}

// Result of a run.
type Result struct {
	Dir                    string
	FirstIv, LastIv        int64 // intervals with traffic
	Traffic                TrafficStats
	Linkem                 linkem.Stats
	Truth                  []truth.Record
	Results                []results.FlowRecord // records of the traffic's intervals
	TruthSent, TruthRecvd  uint64               // from the tcpdump join
	JoinPackets            uint64               // tap A packets of every interval
	JoinMatched            uint64               // of those, found at tap B
	JoinUnmatched, JoinDup uint64
	MeanDelayNS            float64 // over all received packets (truth)
	Report                 eval.Report
	ReceiverMetrics        []string // health series scraped at the end
}

const (
	senderID     = "testbed"
	receiverPort = "7420"
)

// Run builds the topology, starts tcpdump, the emulator and both daemons,
// sends the traffic, waits for the receiver's results of every traffic
// interval, stops everything and evaluates the results against the
// per-packet join of the two tcpdump captures. The namespaces are deleted
// before it returns.
func Run(ctx context.Context, opt Options) (res *Result, err error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opt.Intervals < 1 || opt.Interval < 100*time.Millisecond {
		return nil, errors.New("testbed: need intervals >= 1 and interval >= 100ms")
	}
	opt.Traffic.Duration = time.Duration(opt.Intervals) * opt.Interval // measured; one warm-up interval comes first
	if err := opt.Traffic.Validate(); err != nil {
		return nil, err
	}
	for _, b := range []string{"lds-sender", "lds-receiver", "lds-linkem"} {
		if _, err := os.Stat(filepath.Join(opt.BinDir, b)); err != nil {
			return nil, fmt.Errorf("testbed: %s not built in %s: %w", b, opt.BinDir, err)
		}
	}
	dir := opt.WorkDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res = &Result{Dir: dir}

	topo, err := NewTopology(opt.Prefix)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, topo.Close()) }()
	pki, err := NewPKI(dir, net.IP(DstCtl.AsSlice()))
	if err != nil {
		return nil, err
	}
	sCfg, rCfg := filepath.Join(dir, "sender.yaml"), filepath.Join(dir, "receiver.yaml")
	resultsPath := filepath.Join(dir, "results.jsonl")
	if err := writeConfigs(opt, pki, sCfg, rCfg, resultsPath); err != nil {
		return nil, err
	}
	lkCfg := filepath.Join(dir, "linkem.yaml")
	lc := linkem.DefaultConfig()
	lc.A, lc.B, lc.Forward, lc.Seed = IfMidIn, IfMidOut, opt.Forward, 7
	if err := writeYAML(lkCfg, lc); err != nil {
		return nil, err
	}

	var procs []*proc
	stopAll := func() error {
		var errs []error
		for i := len(procs) - 1; i >= 0; i-- {
			errs = append(errs, procs[i].stop(10*time.Second))
		}
		procs = nil
		return errors.Join(errs...)
	}
	defer func() {
		if procs != nil {
			_ = stopAll()
		}
	}()
	start := func(ns, name string, argv ...string) (*proc, error) {
		p, err := startIn(ns, name, filepath.Join(dir, name+".log"), argv...)
		if err == nil {
			procs = append(procs, p)
		}
		return p, err
	}
	pcapA, pcapB := filepath.Join(dir, "tap-a.pcap"), filepath.Join(dir, "tap-b.pcap")
	filter := "ip and src host " + SrcAddr.String()
	for _, td := range []struct{ ns, ifc, name, file string }{{topo.Mid, IfMidIn, "tcpdump-a", pcapA}, {topo.Dst, IfDst, "tcpdump-b", pcapB}} {
		p, err := start(td.ns, td.name, "tcpdump", "-n", "-i", td.ifc, "-Q", "in", "-s", "256", "-B", "32768",
			"--time-stamp-precision=nano", "-Z", "root", "-w", td.file, filter)
		if err != nil {
			return res, err
		}
		if err := p.waitLog("listening on", 10*time.Second); err != nil {
			return res, err
		}
	}
	lkStats := filepath.Join(dir, "linkem-stats.json")
	if _, err := start(topo.Mid, "lds-linkem", filepath.Join(opt.BinDir, "lds-linkem"), "--config", lkCfg, "--stats", lkStats); err != nil {
		return res, err
	}
	recv, err := start(topo.Dst, "lds-receiver", filepath.Join(opt.BinDir, "lds-receiver"), "--config", rCfg)
	if err != nil {
		return res, err
	}
	time.Sleep(300 * time.Millisecond) // the receiver's listener first: the sender would only back off
	snd, err := start(topo.Mid, "lds-sender", filepath.Join(opt.BinDir, "lds-sender"), "--config", sCfg)
	if err != nil {
		return res, err
	}
	metricsURL := "http://" + net.JoinHostPort(DstCtl.String(), "9465") + "/metrics"
	connected := fmt.Sprintf(`lds_sender_connected{sender="%s"} 1`, senderID)
	deadline := time.Now().Add(20 * time.Second)
	for {
		body, _ := httpGetIn(ctx, NetnsPath(topo.Mid), metricsURL)
		if strings.Contains(body, connected) {
			break
		}
		if err := errors.Join(recv.exited(), snd.exited()); err != nil {
			return res, err
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("testbed: sender not connected within 20s; logs in %s:\nsender:\n%s\nreceiver:\n%s", dir, tail(snd.log, 1500), tail(recv.log, 1500))
		}
		time.Sleep(200 * time.Millisecond)
	}
	log.Info("testbed up", "dir", dir)

	// Traffic starts on an interval boundary with one warm-up interval
	// that is not evaluated: the measured intervals are whole at both
	// daemons and none is the first one in which a daemon sees packets (a
	// deployed pair runs continuously; see docs/testbed.md).
	T := opt.Interval
	begin := time.Now().Add(500 * time.Millisecond).Truncate(T).Add(T)
	res.FirstIv = begin.UnixNano()/int64(T) + 1
	res.LastIv = res.FirstIv + int64(opt.Intervals) - 1
	tc := opt.Traffic
	tc.Duration += T
	res.Traffic, err = Generate(ctx, NetnsPath(topo.Src), IfSrc, begin, tc)
	if err != nil {
		return res, err
	}
	log.Info("traffic sent", "packets", res.Traffic.Sent, "intervals", opt.Intervals)

	if err := waitResults(ctx, resultsPath, res.LastIv, 30*time.Second+3*T, recv, snd); err != nil {
		return res, err
	}
	if body, err := httpGetIn(ctx, NetnsPath(topo.Mid), metricsURL); err == nil {
		res.ReceiverMetrics = metricLines(body, "lds_intervals_total", "lds_interval_capture_drops_total", "lds_usable_cell_ratio", "lds_frame_errors_total")
	}
	if err := stopAll(); err != nil {
		return res, err
	}
	if b, err := os.ReadFile(lkStats); err == nil {
		_ = json.Unmarshal(b, &res.Linkem)
	}
	return res, evaluate(opt, res, pcapA, pcapB, resultsPath)
}

// waitResults waits until the results file holds records of interval
// last and has not grown for a second (the receiver writes an interval's
// records together).
func waitResults(ctx context.Context, path string, last int64, timeout time.Duration, ps ...*proc) error {
	deadline := time.Now().Add(timeout)
	var size int64 = -1
	var seen time.Time
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, p := range ps {
			if err := p.exited(); err != nil {
				return err
			}
		}
		if st, err := os.Stat(path); err == nil {
			if st.Size() != size {
				size, seen = st.Size(), time.Now()
			} else if time.Since(seen) > time.Second && hasInterval(path, last) {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("testbed: no results for interval %d in %s within %v", last, path, timeout)
}

func hasInterval(path string, iv int64) bool {
	recs, err := eval.ReadResultsFile(path)
	if err != nil {
		return false
	}
	for i := range recs {
		if recs[i].Interval >= iv {
			return true
		}
	}
	return false
}

func commonConfig(opt Options) config.Common {
	c := config.DefaultCommon()
	c.Interval = opt.Interval
	c.Sketch.Seed = opt.Seed
	if opt.Columns > 0 {
		c.Sketch.Columns = opt.Columns
	}
	if opt.VLDA > 0 {
		c.Sketch.VLDA = opt.VLDA
	}
	c.Capture.Select = []match.Rule{{Name: "testbed", Src: []string{SrcAddr.String() + "/32"}, Dst: []string{DataNet.String()}}}
	return c
}

// writeConfigs writes the daemons' YAML: the keys the testbed sets, the
// rest left to the defaults (as a user would).
func writeConfigs(opt Options, p *PKI, senderPath, receiverPath, resultsPath string) error {
	c := commonConfig(opt)
	common := func(iface, metrics string) map[string]any {
		m := map[string]any{
			"interval":  c.Interval.String(),
			"max_delay": c.MaxDelay.String(),
			"sketch":    map[string]any{"seed": c.Sketch.Seed, "columns": c.Sketch.Columns, "vlda": c.Sketch.VLDA},
			"capture": map[string]any{
				"select": []map[string]any{{"name": "testbed", "src": c.Capture.Select[0].Src, "dst": c.Capture.Select[0].Dst}},
				"source": map[string]any{"kind": "afpacket", "interface": iface},
			},
			"ptp":     map[string]any{"enabled": false},
			"metrics": map[string]any{"listen": metrics},
			"log":     map[string]any{"level": "info"},
		}
		return m
	}
	s := common(IfMidIn, net.JoinHostPort(MidCtl.String(), "9466"))
	s["sender"] = map[string]any{
		"id":       senderID,
		"receiver": net.JoinHostPort(DstCtl.String(), receiverPort),
		"tls":      map[string]any{"cert": p.ClientCert, "key": p.ClientKey, "ca": p.CA, "server_name": ReceiverServerName},
	}
	r := common(IfDst, net.JoinHostPort(DstCtl.String(), "9465"))
	r["receiver"] = map[string]any{
		"listen":       net.JoinHostPort(DstCtl.String(), receiverPort),
		"tls":          map[string]any{"cert": p.ServerCert, "key": p.ServerKey, "client_ca": p.CA},
		"senders":      []map[string]any{{"id": senderID}},
		"lateness":     "3s",
		"results_file": resultsPath,
	}
	if err := writeYAML(senderPath, s); err != nil {
		return err
	}
	if err := writeYAML(receiverPath, r); err != nil {
		return err
	}
	// Refuse here, with the daemons' own checks, rather than in their logs.
	if _, err := config.LoadSender(senderPath); err != nil {
		return fmt.Errorf("testbed: sender config: %w", err)
	}
	if _, err := config.LoadReceiver(receiverPath); err != nil {
		return fmt.Errorf("testbed: receiver config: %w", err)
	}
	return nil
}

func writeYAML(path string, v any) error {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("testbed: encode %s: %w", path, err)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// evaluate joins the two captures per packet (the truth) and compares the
// receiver's results of the traffic intervals with it.
func evaluate(opt Options, res *Result, pcapA, pcapB, resultsPath string) error {
	c := commonConfig(opt)
	j, err := join.Files(pcapA, pcapB, c.CaptureConfig(), int64(opt.Interval))
	if err != nil {
		return fmt.Errorf("testbed: join tcpdump captures: %w", err)
	}
	res.JoinPackets, res.JoinUnmatched, res.JoinDup = j.Packets, j.Unmatched, j.Duplicates
	var dsum float64
	for _, f := range j.Flows {
		res.JoinMatched += f.Received
	}
	for _, f := range j.Sorted() {
		if f.Interval < res.FirstIv || f.Interval > res.LastIv {
			continue
		}
		res.Truth = append(res.Truth, truthRecord(f, int64(opt.Interval)))
		res.TruthSent += f.Sent
		res.TruthRecvd += f.Received
		if f.Received > 0 {
			dsum += f.MeanNS * float64(f.Received)
		}
	}
	res.MeanDelayNS = dsum / float64(max(res.TruthRecvd, 1))
	recs, err := eval.ReadResultsFile(resultsPath)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Interval >= res.FirstIv && r.Interval <= res.LastIv {
			res.Results = append(res.Results, r)
		}
	}
	res.Report, err = eval.Evaluate(res.Truth, map[string][]results.FlowRecord{"lds": res.Results})
	return err
}

func truthRecord(f *join.Flow, t int64) truth.Record {
	r := truth.Record{Interval: f.Interval, StartNS: f.Interval * t,
		Sent: int64(f.Sent), Received: int64(f.Received), Lost: int64(f.Lost()), Class: "live"}
	r.SetKey(f.Key)
	if f.Received > 0 && !math.IsNaN(f.MeanNS) {
		m, s := f.MeanNS, f.StddevNS
		r.DelayNS, r.StddevNS = &m, &s
	}
	return r
}

// Bin returns the named bin of the "lds" run.
func (r *Result) Bin(name string) (eval.BinStats, bool) {
	for _, run := range r.Report.Runs {
		if run.Label != "lds" {
			continue
		}
		for _, b := range run.Bins {
			if b.Bin == name {
				return b, true
			}
		}
	}
	return eval.BinStats{}, false
}

// Totals sums the results' loss estimates and the truth's losses.
func (r *Result) Totals() (estLoss, trueLoss float64) {
	for _, x := range r.Results {
		if x.Loss != nil {
			estLoss += *x.Loss
		}
	}
	for _, t := range r.Truth {
		trueLoss += float64(t.Lost)
	}
	return estLoss, trueLoss
}

// sortedLines returns lines sorted (for stable reports).
func sortedLines(l []string) []string {
	out := append([]string(nil), l...)
	sort.Strings(out)
	return out
}

// CoverageStats splits delay coverage by whether the flow lost packets:
// with vlda k = 1 a lost packet spoils the flow's only cell in every row,
// so a lossy flow cannot get a delay from its own cells (LDS paper §2.3).
type CoverageStats struct {
	Flows, Covered           int // loss-free (interval, flow) records with enough packets; those with a delay
	LossyFlows, LossyCovered int
}

// Coverage counts truth records with at least minPkts received packets
// that have a result with a delay.
func (r *Result) Coverage(minPkts int64) CoverageStats {
	has := map[join.FlowID]bool{}
	for _, x := range r.Results {
		if x.DelayNS != nil && !math.IsNaN(*x.DelayNS) {
			has[join.FlowID{Interval: x.Interval, Key: x.Key}] = true
		}
	}
	var c CoverageStats
	for _, t := range r.Truth {
		if t.Received < minPkts {
			continue
		}
		k, _ := t.Key() // the truth comes from the join: its keys parse
		ok := has[join.FlowID{Interval: t.Interval, Key: k}]
		if t.Lost == 0 {
			c.Flows++
			if ok {
				c.Covered++
			}
		} else {
			c.LossyFlows++
			if ok {
				c.LossyCovered++
			}
		}
	}
	return c
}
