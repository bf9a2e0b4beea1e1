package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lds-net/lds/internal/api"
	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/tools/eval"
	"github.com/lds-net/lds/tools/join"
)

// SqueezeOptions of a squeeze run (RunSqueeze): real traffic through the
// router, UDP and ICMP in an HTB class of their own (a priority class, as
// operators give real-time traffic) that is squeezed for a while, TCP in
// the default class at a rate that does not congest it.
type SqueezeOptions struct {
	BinDir, WorkDir, Prefix string
	Pair                    RealPair
	UDPFlows                int    // iperf3 -u -P
	UDPRate                 string // iperf3 -b per UDP flow
	PingInterval            string // ping -i
	TCPStreams              int    // iperf3 -P
	TCPRate                 string // iperf3 -b per TCP stream
	// The priority class: its rate (Mbit/s) outside the squeeze, during
	// it, and its FIFO (packets); the TCP class has Bottleneck.
	PrioMbit, SqueezeMbit, PrioLimit int
	Bottleneck                       Bottleneck
	Squeeze                          time.Duration
	// Warmup is how many whole intervals of every flow the receiver must
	// have published before the squeeze (the spike detector's warm-up and
	// a baseline), After how many after it before the traffic stops.
	Warmup, After int
	// PromBin is Prometheus (Debian's package); the alert rules are
	// RulesFile. Prometheus scrapes the receiver every second.
	PromBin, RulesFile string
	Seed               string
}

// DefaultSqueezeOptions returns three UDP flows at 3 Mbit/s and a ping every
// 20 ms in a 20 Mbit/s priority class with a 60-packet FIFO, squeezed to
// 6 Mbit/s for 8 s; two TCP streams at 2 Mbit/s in a 20 Mbit/s class.
func DefaultSqueezeOptions() SqueezeOptions {
	return SqueezeOptions{Pair: RealPair{Name: "defaults", Interval: time.Second}, UDPFlows: 3, UDPRate: "3M", PingInterval: "0.02", TCPStreams: 2, TCPRate: "2M",
		PrioMbit: 20, SqueezeMbit: 6, PrioLimit: 60, Bottleneck: Bottleneck{RateMbit: 20, Limit: 400},
		Squeeze: 8 * time.Second, Warmup: 8, After: 4, Seed: "real-traffic-seed"}
}

// SqueezeResult is what a squeeze run measured.
type SqueezeResult struct {
	Dir                   string
	OnsetNS, EndNS        int64 // wall clock of the two `tc class change`
	Onset, End            int64 // their intervals
	Truth                 *join.Result
	Records               []results.FlowRecord
	Qdisc                 string
	SenderKernelDrops     int64
	ReceiverKernelDrops   int64
	Fired                 map[capture.FlowKey]time.Time // LDSFlowLatencySpike firing, by flow, first seen
	LossFired             map[capture.FlowKey]time.Time // LDSFlowLossSpike
	PromAlertsPolls       int
	JoinUnmatched, JoinDu uint64
	// TruthP10, TruthP99, TruthMean: each (interval, flow)'s exact
	// 10th and 99th percentile and mean one-way delay (ns) from the
	// tcpdump join.
	TruthP10, TruthP99, TruthMean map[join.FlowID]float64
	// LostLists is each interval's lost_list from the receiver's
	// /api/v1/intervals at the end of the run (nil entry: none given).
	LostLists map[int64]*results.LostSummary
	mu        sync.Mutex // Fired, LossFired, PromAlertsPolls while the poll runs
}

// Squeezed says whether a flow is in the priority class (UDP to the
// iperf3 UDP port, or ICMP).
func Squeezed(k capture.FlowKey) bool {
	return k.Proto == 1 || k.Proto == 17 && k.DPort == 5202
}

// RunSqueeze builds the real testbed with the priority class, starts
// tcpdump at both taps, the daemon pair and Prometheus (in the router
// namespace, scraping the receiver every second and evaluating
// RulesFile), runs the traffic, squeezes the priority class once every
// flow has Warmup intervals published, restores it after Squeeze, stops
// the traffic After intervals later, and joins the captures. While the
// traffic runs it polls Prometheus's alerts API and records which flows'
// alerts fire. The namespaces are deleted before it returns.
func RunSqueeze(ctx context.Context, opt SqueezeOptions) (res *SqueezeResult, err error) {
	dir := opt.WorkDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res = &SqueezeResult{Dir: dir, Fired: map[capture.FlowKey]time.Time{}, LossFired: map[capture.FlowKey]time.Time{}}
	topo, err := NewRealTopology(opt.Prefix, opt.Bottleneck, false)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, topo.Close()) }()
	if err := priorityClass(topo, opt); err != nil {
		return res, err
	}
	pki, err := NewPKI(dir, net.IP(DstCtl.AsSlice()))
	if err != nil {
		return nil, err
	}
	ps := &procSet{dir: dir, quiet: map[*proc]bool{}}
	defer func() {
		if ps.procs != nil {
			_ = ps.stopAll()
		}
	}()
	pcapA, pcapB, err := startTapCaptures(ps, topo, dir)
	if err != nil {
		return res, err
	}
	ropt := DefaultRealOptions()
	ropt.BinDir, ropt.Seed = opt.BinDir, opt.Seed
	daemons, err := startRealPair(ctx, ps, topo, pki, ropt, 0, opt.Pair)
	if err != nil {
		return res, err
	}
	promURL, err := startPrometheus(ctx, ps, topo, opt)
	if err != nil {
		return res, err
	}
	clients, err := squeezeTraffic(ps, topo, opt)
	if err != nil {
		return res, err
	}
	resultsPath := realResultsPath(dir, opt.Pair)
	T := int64(opt.Pair.Interval)
	begin := time.Now().UnixNano() / T
	// The baselines: Warmup whole intervals after the one traffic starts in.
	if err := waitInterval(ctx, resultsPath, begin+1+int64(opt.Warmup), time.Duration(opt.Warmup+30)*opt.Pair.Interval, append(daemons, clients...)...); err != nil {
		return res, err
	}
	stopPoll := pollAlerts(ctx, topo, promURL, res)
	if err := setPrioRate(topo, opt.SqueezeMbit, opt); err != nil {
		stopPoll()
		return res, err
	}
	res.OnsetNS = time.Now().UnixNano()
	timer := time.NewTimer(opt.Squeeze) // the squeeze's length is the test's own choice, not a wait for something
	select {
	case <-timer.C:
	case <-ctx.Done():
		stopPoll()
		return res, ctx.Err()
	}
	err = setPrioRate(topo, opt.PrioMbit, opt)
	res.EndNS = time.Now().UnixNano()
	if err != nil {
		stopPoll()
		return res, err
	}
	res.Onset, res.End = res.OnsetNS/T, res.EndNS/T
	if err := waitInterval(ctx, resultsPath, res.End+int64(opt.After), time.Duration(opt.After+30)*opt.Pair.Interval, daemons...); err != nil {
		stopPoll()
		return res, err
	}
	// Prometheus keeps lds_flow_spike for spike_window intervals: the
	// alerts stay firing while the poll waits for the last ones.
	waitAlerts(ctx, res, opt.UDPFlows+1, 90*time.Second)
	stopPoll()
	for _, c := range clients {
		_ = c.stop(5 * time.Second)
	}
	last := time.Now().UnixNano()/T - 1
	if err := waitResults(ctx, resultsPath, last, 30*time.Second+3*opt.Pair.Interval, daemons...); err != nil {
		return res, err
	}
	body, _ := httpGetIn(ctx, NetnsPath(topo.Rtr), realMetricsURL(0))
	_ = os.WriteFile(filepath.Join(dir, "metrics-receiver.txt"), []byte(body), 0o644)
	res.ReceiverKernelDrops = kernelDrops(body)
	if res.LostLists, err = fetchLostLists(ctx, topo, dir); err != nil {
		return res, err
	}
	sbody, _ := httpGetIn(ctx, NetnsPath(topo.Rtr), realSenderMetricsURL(0))
	res.SenderKernelDrops = kernelDrops(sbody)
	res.Qdisc = topo.QdiscStats()
	if err := ps.stopAll(); err != nil {
		return res, err
	}
	c := config.DefaultCommon()
	c.Sketch.Seed = opt.Seed
	c.Capture.Select = []match.Rule{{Name: "real", Src: []string{RealSndNet.String()}, Dst: []string{RealRcvNet.String()}}}
	if res.Truth, err = join.Files(pcapA, pcapB, c.CaptureConfig(), T); err != nil {
		return res, fmt.Errorf("testbed: join tcpdump captures: %w", err)
	}
	res.JoinUnmatched, res.JoinDu = res.Truth.Unmatched, res.Truth.Duplicates
	if err := truthTails(res, pcapA, pcapB, c, T); err != nil {
		return res, err
	}
	res.Records, err = eval.ReadResultsFile(resultsPath)
	return res, err
}

// fetchLostLists reads each interval's lost_list from the receiver's
// /api/v1/intervals (three tries: the machine may be loaded) and keeps
// the answer in dir as intervals-receiver.json.
func fetchLostLists(ctx context.Context, topo *RealTopology, dir string) (map[int64]*results.LostSummary, error) {
	url := strings.TrimSuffix(realMetricsURL(0), "/metrics") + "/api/v1/intervals"
	var body string
	var err error
	for range 3 {
		if body, err = httpGetIn(ctx, NetnsPath(topo.Rtr), url); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("testbed: the receiver's %s: %w", url, err)
	}
	_ = os.WriteFile(filepath.Join(dir, "intervals-receiver.json"), []byte(body), 0o644)
	var a api.IntervalsAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		return nil, fmt.Errorf("testbed: the receiver's %s: %w", url, err)
	}
	out := map[int64]*results.LostSummary{}
	for _, iv := range a.Intervals {
		out[iv.Interval] = iv.LostList
	}
	return out, nil
}

// truthTails fills res.TruthP10, TruthP99 and TruthMean from the
// per-packet join.
func truthTails(res *SqueezeResult, pcapA, pcapB string, c config.Common, T int64) error {
	p, err := capture.NewParser(c.CaptureConfig())
	if err != nil {
		return err
	}
	m, err := join.MatchFiles(pcapA, pcapB, p)
	if err != nil {
		return err
	}
	delays := map[join.FlowID][]float64{}
	err = capture.EachPacket(pcapA, p, func(pk *capture.Packet) bool {
		if recv, got, ok := m.Lookup(pk.Key, pk.PktHash); ok && got {
			id := join.FlowID{Interval: pk.TS / T, Key: pk.Key}
			delays[id] = append(delays[id], float64(recv-pk.TS))
		}
		return true
	})
	if err != nil {
		return err
	}
	res.TruthP10, res.TruthP99, res.TruthMean = map[join.FlowID]float64{}, map[join.FlowID]float64{}, map[join.FlowID]float64{}
	for id, d := range delays {
		slices.Sort(d)
		var sum float64
		for _, x := range d {
			sum += x
		}
		res.TruthP10[id], res.TruthP99[id], res.TruthMean[id] = sample.Quantile(d, 0.1), sample.Quantile(d, 0.99), sum/float64(len(d))
	}
	return nil
}

// priorityClass adds the UDP/ICMP class 1:20 beside the TCP class 1:10
// of the bottleneck, with its own FIFO, and steers IP protocols 17 and 1
// into it.
func priorityClass(topo *RealTopology, opt SqueezeOptions) error {
	rate := strconv.Itoa(opt.PrioMbit) + "mbit"
	for _, q := range [][]string{
		{"class", "add", "dev", IfRealBottle, "parent", "1:", "classid", "1:20", "htb", "rate", rate, "ceil", rate, "prio", "0", "quantum", "1514"},
		{"qdisc", "add", "dev", IfRealBottle, "parent", "1:20", "handle", "20:", "pfifo", "limit", strconv.Itoa(opt.PrioLimit)},
		{"filter", "add", "dev", IfRealBottle, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "protocol", "17", "0xff", "flowid", "1:20"},
		{"filter", "add", "dev", IfRealBottle, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "protocol", "1", "0xff", "flowid", "1:20"},
	} {
		if err := nsRun(topo.Rtr, append([]string{"tc"}, q...)...); err != nil {
			return err
		}
	}
	return nil
}

// setPrioRate changes the priority class's rate (and ceil) in place.
func setPrioRate(topo *RealTopology, mbit int, opt SqueezeOptions) error {
	rate := strconv.Itoa(mbit) + "mbit"
	return nsRun(topo.Rtr, "tc", "class", "change", "dev", IfRealBottle, "parent", "1:", "classid", "1:20",
		"htb", "rate", rate, "ceil", rate, "prio", "0", "quantum", "1514")
}

// startPrometheus runs Prometheus in the router namespace (it reaches the
// receiver's metrics over the control link) and waits until it is ready.
func startPrometheus(ctx context.Context, ps *procSet, topo *RealTopology, opt SqueezeOptions) (string, error) {
	rules, err := filepath.Abs(opt.RulesFile)
	if err != nil {
		return "", err
	}
	target := strings.TrimSuffix(strings.TrimPrefix(realMetricsURL(0), "http://"), "/metrics")
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %s\nscrape_configs:\n  - job_name: lds\n    static_configs:\n      - targets: ['%s']\n", rules, target)
	path := filepath.Join(ps.dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	const listen = "127.0.0.1:9090"
	p, err := ps.start(topo.Rtr, "prometheus", opt.PromBin, "--config.file="+path, "--storage.tsdb.path="+filepath.Join(ps.dir, "tsdb"),
		"--web.listen-address="+listen)
	if err != nil {
		return "", err
	}
	ps.quiet[p] = true
	url := "http://" + listen
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := httpGetIn(ctx, NetnsPath(topo.Rtr), url+"/-/ready"); err == nil {
			return url, nil
		}
		if err := p.exited(); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("testbed: Prometheus not ready within 60s; log %s:\n%s", p.log, tail(p.log, 2000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// squeezeTraffic starts the iperf3 servers, then UDP (UDPFlows flows),
// TCP (TCPStreams at TCPRate) and ping, each for up to 10 minutes: the
// run stops them.
func squeezeTraffic(ps *procSet, topo *RealTopology, opt SqueezeOptions) ([]*proc, error) {
	for _, port := range []string{"5201", "5202"} {
		p, err := ps.start(topo.Rcv, "iperf3-server-"+port, "iperf3", "-s", "--forceflush", "-p", port)
		if err != nil {
			return nil, err
		}
		ps.quiet[p] = true
		if err := p.waitLog("Server listening", 10*time.Second); err != nil {
			return nil, err
		}
	}
	dst := RealRcvAddr.String()
	var clients []*proc
	for _, c := range []struct {
		name, wait string
		argv       []string
	}{
		{"iperf3-udp", "connected to", []string{"iperf3", "-c", dst, "-p", "5202", "-u", "-P", strconv.Itoa(opt.UDPFlows), "-b", opt.UDPRate, "-l", "1000", "-t", "600", "--forceflush"}},
		{"iperf3-tcp", "connected to", []string{"iperf3", "-c", dst, "-p", "5201", "-P", strconv.Itoa(opt.TCPStreams), "-C", RealCongestionControl, "-b", opt.TCPRate, "-l", "8K", "-t", "600", "--forceflush"}},
		{"ping", "", []string{"ping", "-q", "-i", opt.PingInterval, "-w", "600", dst}},
	} {
		p, err := ps.start(topo.Snd, c.name, c.argv...)
		if err != nil {
			return nil, err
		}
		ps.quiet[p] = true // stopped by the run, not at their end
		clients = append(clients, p)
		if c.wait != "" {
			if err := p.waitLog(c.wait, 20*time.Second); err != nil {
				return nil, err
			}
		}
	}
	return clients, nil
}

// waitInterval waits until the results file holds interval iv.
func waitInterval(ctx context.Context, path string, iv int64, timeout time.Duration, ps ...*proc) error {
	deadline := time.Now().Add(timeout)
	for !hasInterval(path, iv) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, p := range ps {
			if err := p.exited(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: no results for interval %d in %s within %v", iv, path, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// pollAlerts polls Prometheus's alerts API every 500 ms and records the
// first time each flow's LDSFlowLatencySpike and LDSFlowLossSpike is
// seen firing; the returned function stops it and waits for it.
func pollAlerts(ctx context.Context, topo *RealTopology, url string, res *SqueezeResult) func() {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			body, err := httpGetIn(ctx, NetnsPath(topo.Rtr), url+"/api/v1/alerts")
			if err == nil {
				recordAlerts(body, res)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// recordAlerts notes the flows whose alerts fire in an alerts API answer.
func recordAlerts(body string, res *SqueezeResult) {
	var a struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(body), &a) != nil {
		return
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	res.PromAlertsPolls++
	for _, x := range a.Data.Alerts {
		if x.State != "firing" {
			continue
		}
		m := x.Labels
		num := func(s string) uint64 { v, _ := strconv.ParseUint(m[s], 10, 16); return v }
		k, err := capture.ParseFlowKey(m["src"], m["dst"], uint8(num("proto")), uint16(num("sport")), uint16(num("dport")))
		if err != nil {
			continue
		}
		into := map[string]map[capture.FlowKey]time.Time{"LDSFlowLatencySpike": res.Fired, "LDSFlowLossSpike": res.LossFired}[m["alertname"]]
		if into != nil {
			if _, ok := into[k]; !ok {
				into[k] = time.Now()
			}
		}
	}
}

// waitAlerts waits, up to bound, until want squeezed flows have fired
// LDSFlowLatencySpike.
func waitAlerts(ctx context.Context, res *SqueezeResult, want int, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		res.mu.Lock()
		n := 0
		for k := range res.Fired {
			if Squeezed(k) {
				n++
			}
		}
		res.mu.Unlock()
		if n >= want {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}
