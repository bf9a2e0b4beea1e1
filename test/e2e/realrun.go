package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/tools/eval"
	"github.com/lds-net/lds/tools/join"
	"github.com/lds-net/lds/tools/linkem"
	"github.com/lds-net/lds/tools/truth"
)

// RealCongestionControl is the iperf3 TCP streams' congestion control:
// cubic, Linux's default, loss-based, so it fills the bottleneck's FIFO
// until tail drop as deployed hosts do. (Set per socket: a network
// namespace may only default to the allowed algorithms, and this machine's
// default, bbr, keeps the queue short.)
const RealCongestionControl = "cubic"

// RealPair is one lds-sender (tap A) + lds-receiver (tap B) pair. Several
// pairs watch the same taps side by side, so that configurations are
// compared on the very same packets.
type RealPair struct {
	Name     string        // names the files and the processes
	Interval time.Duration // interval
	MaxDelay time.Duration // max_delay; 0 leaves the key out (the daemons' default)
	// Defaults leaves the capture ring's keys and receiver.lateness out:
	// the daemons' default ring instead of the testbed's longer one, and
	// their default wait for the other end's sketch (10 s) instead of the
	// testbed's 3 s.
	Defaults bool
	// BlockTimeout, if set, is the pair's capture.source.block_timeout
	// (with Defaults too): a ring that holds less at low rates.
	BlockTimeout time.Duration
}

// RealOptions of a real-traffic run (RunReal).
type RealOptions struct {
	BinDir, WorkDir, Prefix string
	Duration                time.Duration // of the traffic
	Bottleneck              Bottleneck
	Pairs                   []RealPair
	TCPStreams              int           // iperf3 -P (kernel congestion control)
	TCPRate                 string        // iperf3 -b per TCP stream; "" = as fast as congestion control lets it
	UDPRate                 string        // iperf3 -u -b
	FetchPause              time.Duration // between two rounds of curl upload + fetch
	Seed                    string        // sketch.seed
	Stalls                  []Stall       // daemons stopped and resumed during the traffic
	Log                     *slog.Logger
}

// DefaultRealOptions returns 30 s of traffic through 20 Mbit/s with a 400-packet
// FIFO (~240 ms of queue), 4 TCP streams, UDP at 2 Mbit/s.
func DefaultRealOptions() RealOptions {
	return RealOptions{Duration: 30 * time.Second, Bottleneck: Bottleneck{RateMbit: 20, Limit: 400},
		TCPStreams: 4, UDPRate: "2M", FetchPause: 300 * time.Millisecond, Seed: "real-traffic-seed"}
}

// RealResult of a run: the bottleneck's and the join's counters and one
// scored result per pair.
type RealResult struct {
	Dir                            string
	Begin, End                     time.Time // traffic
	Qdisc                          string    // tc -s qdisc of the bottleneck at the end
	QdiscDropped                   int64
	Fetches, FetchErrors           int // HTTP fetches by curl
	JoinPackets, JoinMatched       uint64
	JoinUnmatched, JoinDup         uint64
	Pairs                          []RealPairResult
	FlowDelayMinMS, FlowDelayMedMS float64 // per-(interval, flow) true mean delays, flows with >= 100 packets
	FlowDelayMaxMS                 float64
	PacketDelayP50MS               float64 // joined packets, all intervals
	PacketDelayP99MS               float64 // 99th percentile: the queue's regime, without a rare host stall
	PacketDelayMaxMS               float64
	Stalls                         []StallResult
}

// RealPairResult is one pair's results scored against the tcpdump join.
type RealPairResult struct {
	Pair            RealPair
	FirstIv, LastIv int64
	Truth           []truth.Record
	Results         []results.FlowRecord
	Report          eval.Report
	Score           RealScore
	ReceiverMetrics []string
	// KernelDrops are lds_capture_drops_total{reason="kernel"} of the
	// sender and the receiver at the end (-1: not scraped).
	SenderKernelDrops, ReceiverKernelDrops int64
}

// RealScore is what the acceptance asks about, over the
// evaluated intervals' (interval, flow) truth records. Packet counts are
// the packets the flow sent in the interval (tap A).
type RealScore struct {
	Records            int // truth records
	Big, BigLossFree   int // records with >= 100 packets; of those, without loss
	FalseLossBig       int // loss-free, >= 100 packets, loss >= 0.5 reported
	FalseLossAll       int // loss-free, any size, loss >= 0.5 reported
	BigDelayFlows      int // >= 100 packets with a true delay (eval's ">=100" bin)
	BigCovered         int // of those, with a delay estimate
	LossFreeBigCovered int // loss-free >= 100 with a delay estimate
	MedianRelBig       float64
	MedianRel1000      float64 // NaN: no flow in the bin
	MedianRel100       float64 // 100-999
	Lossy              int     // records with true loss
	LossyDetected      int     // of those, a result with loss >= 0.5
	LossyWithheld      int     // of those, flagged delay_beyond_window: loss withheld, not claimed absent
	LossyBig           int
	LossyBigDetected   int
	Statuses           map[results.Status]int // result records by status (StatusMeasured left out)
	Spurious           int                    // result records with no truth record
}

// Coverage is BigCovered / BigDelayFlows.
func (s RealScore) Coverage() float64 { return ratio(s.BigCovered, s.BigDelayFlows) }

// LossFreeCoverage is LossFreeBigCovered / BigLossFree.
func (s RealScore) LossFreeCoverage() float64 { return ratio(s.LossFreeBigCovered, s.BigLossFree) }

func ratio(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// RunReal builds the sender host — router — receiver host topology with
// the HTB bottleneck, starts tcpdump and every daemon pair at the taps,
// runs real traffic (iperf3 TCP and UDP, ping, curl uploads and fetches)
// for opt.Duration, waits for every pair's results, stops everything and
// scores each pair against the per-packet join of the two captures. The
// namespaces are deleted before it returns.
func RunReal(ctx context.Context, opt RealOptions) (res *RealResult, err error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(opt.Pairs) == 0 || opt.Duration < 5*time.Second {
		return nil, errors.New("testbed: a real run needs a daemon pair and >= 5s of traffic")
	}
	dir := opt.WorkDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res = &RealResult{Dir: dir}
	topo, err := NewRealTopology(opt.Prefix, opt.Bottleneck, false)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, topo.Close()) }()
	pki, err := NewPKI(dir, net.IP(DstCtl.AsSlice()))
	if err != nil {
		return nil, err
	}
	ps := &procSet{dir: dir}
	defer func() {
		if ps.procs != nil {
			_ = ps.stopAll()
		}
	}()
	pcapA, pcapB, err := startTapCaptures(ps, topo, dir)
	if err != nil {
		return res, err
	}
	var daemons []*proc
	for i, pr := range opt.Pairs {
		ds, err := startRealPair(ctx, ps, topo, pki, opt, i, pr)
		if err != nil {
			return res, err
		}
		daemons = append(daemons, ds...)
	}
	log.Info("real testbed up", "dir", dir, "pairs", len(opt.Pairs))

	stalls := &stallRunner{ns: topo.Rtr, daemons: daemons}
	if err := runRealTraffic(ctx, ps, topo, opt, res, stalls); err != nil {
		return res, err
	}
	log.Info("traffic done", "fetches", res.Fetches, "fetch_errors", res.FetchErrors)
	res.Qdisc = topo.QdiscStats()
	res.QdiscDropped = qdiscDropped(res.Qdisc)
	res.Pairs = make([]RealPairResult, len(opt.Pairs))
	for i, pr := range opt.Pairs {
		T := pr.Interval
		res.Pairs[i] = RealPairResult{Pair: pr,
			// Skip the interval traffic starts in and one more (TCP slow
			// start, a daemon's first interval with packets); end with the
			// last whole interval of traffic.
			FirstIv: res.Begin.UnixNano()/int64(T) + 2, LastIv: res.End.UnixNano()/int64(T) - 1}
		if err := waitResults(ctx, realResultsPath(dir, pr), res.Pairs[i].LastIv, 30*time.Second+3*T, daemons...); err != nil {
			return res, err
		}
		body, err := httpGetIn(ctx, NetnsPath(topo.Rtr), realMetricsURL(i))
		_ = os.WriteFile(filepath.Join(dir, "metrics-receiver-"+pr.Name+".txt"), []byte(body), 0o644)
		res.Pairs[i].ReceiverMetrics = metricLines(body, "lds_intervals_total", "lds_interval_capture_drops_total", "lds_frame_errors_total")
		if err != nil {
			res.Pairs[i].ReceiverMetrics = append(res.Pairs[i].ReceiverMetrics, "scrape failed: "+err.Error())
		}
		res.Pairs[i].ReceiverKernelDrops = kernelDrops(body)
		sbody, _ := httpGetIn(ctx, NetnsPath(topo.Rtr), realSenderMetricsURL(i))
		_ = os.WriteFile(filepath.Join(dir, "metrics-sender-"+pr.Name+".txt"), []byte(sbody), 0o644)
		res.Pairs[i].SenderKernelDrops = kernelDrops(sbody)
	}
	if err := ps.stopAll(); err != nil {
		return res, err
	}
	return res, evaluateReal(opt, res, pcapA, pcapB)
}

// procSet starts processes with logs in dir and stops them in reverse.
type procSet struct {
	dir   string
	procs []*proc
	quiet map[*proc]bool // their exit status on SIGTERM is not an error (iperf3 -s exits 1)
}

func (s *procSet) start(ns, name string, argv ...string) (*proc, error) {
	p, err := startIn(ns, name, filepath.Join(s.dir, name+".log"), argv...)
	if err == nil {
		s.procs = append(s.procs, p)
	}
	return p, err
}

func (s *procSet) stopAll() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].stop(10 * time.Second); err != nil && !s.quiet[s.procs[i]] {
			errs = append(errs, err)
		}
	}
	s.procs = nil
	return errors.Join(errs...)
}

func realResultsPath(dir string, p RealPair) string {
	return filepath.Join(dir, "results-"+p.Name+".jsonl")
}

func realMetricsURL(i int) string {
	return "http://" + net.JoinHostPort(DstCtl.String(), strconv.Itoa(9500+i)) + "/metrics"
}

func realSenderMetricsURL(i int) string {
	return "http://" + net.JoinHostPort(MidCtl.String(), strconv.Itoa(9600+i)) + "/metrics"
}

// kernelDrops reads lds_capture_drops_total{reason="kernel"} from an
// exposition (-1 if absent).
func kernelDrops(body string) int64 {
	for _, l := range metricLines(body, `lds_capture_drops_total{reason="kernel"}`) {
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			return int64(v)
		}
	}
	return -1
}

// realSenderID is every pair's sender id: each pair has a receiver of its
// own, and the one client certificate (NewPKI) names senderID.
func realSenderID(RealPair) string { return senderID }

// startRealPair writes pair i's configs and starts its receiver (tap B)
// and sender (tap A), then waits until the sender is connected.
func startRealPair(ctx context.Context, ps *procSet, topo *RealTopology, pki *PKI, opt RealOptions, i int, pr RealPair) ([]*proc, error) {
	sCfg, rCfg := filepath.Join(ps.dir, "sender-"+pr.Name+".yaml"), filepath.Join(ps.dir, "receiver-"+pr.Name+".yaml")
	if err := writeRealConfigs(opt, pki, i, pr, sCfg, rCfg); err != nil {
		return nil, err
	}
	recv, err := ps.start(topo.Rcv, "lds-receiver-"+pr.Name, filepath.Join(opt.BinDir, "lds-receiver"), "--config", rCfg)
	if err != nil {
		return nil, err
	}
	time.Sleep(300 * time.Millisecond) // the receiver's listener first: the sender would only back off
	snd, err := ps.start(topo.Rtr, "lds-sender-"+pr.Name, filepath.Join(opt.BinDir, "lds-sender"), "--config", sCfg)
	if err != nil {
		return nil, err
	}
	connected := fmt.Sprintf(`lds_sender_connected{sender="%s"} 1`, realSenderID(pr))
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, _ := httpGetIn(ctx, NetnsPath(topo.Rtr), realMetricsURL(i))
		if strings.Contains(body, connected) {
			return []*proc{recv, snd}, nil
		}
		if err := errors.Join(recv.exited(), snd.exited()); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("testbed: sender %s not connected within 30s; logs in %s:\nsender:\n%s\nreceiver:\n%s", pr.Name, ps.dir, tail(snd.log, 1500), tail(recv.log, 1500))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// realCommon is the shared part of a pair's configuration, as a user
// writes it: only the keys that matter here.
func realCommon(opt RealOptions, pr RealPair, iface, metrics string) map[string]any {
	source := map[string]any{"kind": "afpacket", "interface": iface, "block_size": 65536, "num_blocks": 1024}
	if pr.Defaults {
		source = map[string]any{"kind": "afpacket", "interface": iface}
	}
	if pr.BlockTimeout > 0 {
		source["block_timeout"] = pr.BlockTimeout.String()
	}
	m := map[string]any{
		"interval": pr.Interval.String(),
		"sketch":   map[string]any{"seed": opt.Seed},
		"capture": map[string]any{
			"select": []map[string]any{{"name": "real", "src": []string{RealSndNet.String()}, "dst": []string{RealRcvNet.String()}}},
			// 1024 blocks of 64 KiB instead of the default 256 of 256 KiB:
			// at these rates the kernel retires a block every block_timeout
			// (50 ms), so the ring holds num_blocks × 50 ms of traffic:
			// ~51 s instead of 12.8 s, for the loaded machine the tests
			// share (docs/testbed.md). Defaults pairs keep the default.
			"source": source,
		},
		"ptp":     map[string]any{"enabled": false},
		"metrics": map[string]any{"listen": metrics},
		"log":     map[string]any{"level": "info"},
	}
	if pr.MaxDelay > 0 {
		m["max_delay"] = pr.MaxDelay.String()
	}
	return m
}

func writeRealConfigs(opt RealOptions, p *PKI, i int, pr RealPair, senderPath, receiverPath string) error {
	port := strconv.Itoa(7420 + i)
	s := realCommon(opt, pr, IfRealTapA, net.JoinHostPort(MidCtl.String(), strconv.Itoa(9600+i)))
	s["sender"] = map[string]any{
		"id":       realSenderID(pr),
		"receiver": net.JoinHostPort(DstCtl.String(), port),
		"tls":      map[string]any{"cert": p.ClientCert, "key": p.ClientKey, "ca": p.CA, "server_name": ReceiverServerName},
	}
	r := realCommon(opt, pr, IfRealTapB, net.JoinHostPort(DstCtl.String(), strconv.Itoa(9500+i)))
	r["receiver"] = map[string]any{
		"listen":       net.JoinHostPort(DstCtl.String(), port),
		"tls":          map[string]any{"cert": p.ServerCert, "key": p.ServerKey, "client_ca": p.CA},
		"senders":      []map[string]any{{"id": realSenderID(pr)}},
		"results_file": realResultsPath(filepath.Dir(senderPath), pr),
		"lost_file":    realLostPath(filepath.Dir(senderPath), pr),
	}
	if !pr.Defaults {
		r["receiver"].(map[string]any)["lateness"] = "3s"
	}
	if err := writeYAML(senderPath, s); err != nil {
		return err
	}
	if err := writeYAML(receiverPath, r); err != nil {
		return err
	}
	if _, err := config.LoadSender(senderPath); err != nil {
		return fmt.Errorf("testbed: sender config %s: %w", pr.Name, err)
	}
	if _, err := config.LoadReceiver(receiverPath); err != nil {
		return fmt.Errorf("testbed: receiver config %s: %w", pr.Name, err)
	}
	return nil
}

// runRealTraffic starts the servers in the receiver host (iperf3 for TCP
// and UDP, an HTTP server on the kernel stack of the namespace), then, from
// the sender host, iperf3 with opt.TCPStreams TCP streams, one iperf3 UDP
// stream, ping every 50 ms and a loop of curl uploads and fetches, all for
// opt.Duration.
func runRealTraffic(ctx context.Context, ps *procSet, topo *RealTopology, opt RealOptions, res *RealResult, stalls *stallRunner) error {
	for _, port := range []string{"5201", "5202"} {
		p, err := ps.start(topo.Rcv, "iperf3-server-"+port, "iperf3", "-s", "--forceflush", "-p", port)
		if err != nil {
			return err
		}
		if ps.quiet == nil {
			ps.quiet = map[*proc]bool{}
		}
		ps.quiet[p] = true
		if err := p.waitLog("Server listening", 10*time.Second); err != nil {
			return err
		}
	}
	srv, err := startHTTPServer(NetnsPath(topo.Rcv), net.JoinHostPort(RealRcvAddr.String(), "8080"))
	if err != nil {
		return err
	}
	defer srv.Close()
	upload := filepath.Join(ps.dir, "upload.bin")
	if err := os.WriteFile(upload, make([]byte, 150<<10), 0o644); err != nil {
		return err
	}
	secs := strconv.Itoa(int(opt.Duration.Seconds()))
	dst := RealRcvAddr.String()
	tcpArgs := []string{"iperf3", "-c", dst, "-p", "5201", "-P", strconv.Itoa(opt.TCPStreams), "-C", RealCongestionControl, "-t", secs}
	if opt.TCPRate != "" {
		// 8 kB writes: iperf3's default 128 kB write is a burst of ~90
		// segments whenever its rate limiter lets one go.
		tcpArgs = append(tcpArgs, "-b", opt.TCPRate, "-l", "8K")
	}
	res.Begin = time.Now()
	var clients []*proc
	for _, c := range []struct {
		name, wait string // wait: the log line that says the client is set up
		argv       []string
	}{
		// UDP first: its set-up datagram crosses the bottleneck and must
		// not meet a FIFO that TCP has already filled.
		{"iperf3-udp", "connected to", []string{"iperf3", "-c", dst, "-p", "5202", "-u", "-b", opt.UDPRate, "-l", "1000", "-t", secs, "--forceflush"}},
		{"iperf3-tcp", "", tcpArgs},
		{"ping", "", []string{"ping", "-q", "-i", "0.05", "-w", secs, dst}},
	} {
		p, err := ps.start(topo.Snd, c.name, c.argv...)
		if err != nil {
			return err
		}
		clients = append(clients, p)
		if c.wait != "" {
			if err := p.waitLog(c.wait, 20*time.Second); err != nil {
				return err
			}
		}
	}
	type stallDone struct {
		out []StallResult
		err error
	}
	stallCh := make(chan stallDone, 1)
	go func() {
		out, err := stalls.run(ctx, res.Begin, opt.Stalls)
		stallCh <- stallDone{out, err}
	}()
	res.Fetches, res.FetchErrors = curlLoop(ctx, topo.Snd, "http://"+net.JoinHostPort(dst, "8080"), upload, res.Begin.Add(opt.Duration), opt.FetchPause)
	res.End = res.Begin.Add(opt.Duration)
	sd := <-stallCh // ends at the latest 30 s after its last SIGCONT, or with ctx
	if res.Stalls = sd.out; sd.err != nil {
		return sd.err
	}
	for _, p := range clients {
		select {
		case err := <-p.done:
			p.done <- err
			if err != nil {
				return fmt.Errorf("testbed: %s: %w; log %s:\n%s", p.name, err, p.log, tail(p.log, 1500))
			}
		case <-time.After(opt.Duration + 30*time.Second):
			return fmt.Errorf("testbed: %s still running %v after its end", p.name, 30*time.Second)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// curlLoop runs, until the deadline, a curl upload of the file (POST) and
// a curl fetch of 20 kB (GET), each a new TCP connection, with a pause
// between rounds.
func curlLoop(ctx context.Context, ns, base, upload string, deadline time.Time, pause time.Duration) (fetches, failures int) {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, args := range [][]string{
			{"--data-binary", "@" + upload, base + "/upload"},
			{base + "/data?bytes=20000"},
		} {
			argv := append([]string{"netns", "exec", ns, "curl", "-sS", "-o", "/dev/null", "--max-time", "10"}, args...)
			cmd := execCommandContext(ctx, "ip", argv...)
			fetches++
			if err := cmd.Run(); err != nil {
				failures++
			}
		}
		time.Sleep(pause)
	}
	return fetches, failures
}

// startHTTPServer serves, on a listener opened inside the namespace (so on
// its kernel stack), POST /upload (the body is read and dropped) and GET
// /data?bytes=N.
func startHTTPServer(netns, addr string) (*http.Server, error) {
	var ln net.Listener
	if err := linkem.InNetns(netns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return nil, fmt.Errorf("testbed: HTTP server in %s: %w", netns, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d\n", n)
	})
	mux.HandleFunc("GET /data", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("bytes"))
		_, _ = w.Write(make([]byte, min(max(n, 0), 1<<20)))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

var qdiscDropRe = regexp.MustCompile(`qdisc pfifo[^\n]*\n[^\n]*dropped (\d+)`)

func qdiscDropped(s string) int64 {
	m := qdiscDropRe.FindStringSubmatch(s)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// evaluateReal joins the captures per packet once per interval length
// and scores every pair.
func evaluateReal(opt RealOptions, res *RealResult, pcapA, pcapB string) error {
	c := config.DefaultCommon()
	c.Sketch.Seed = opt.Seed
	c.Capture.Select = []match.Rule{{Name: "real", Src: []string{RealSndNet.String()}, Dst: []string{RealRcvNet.String()}}}
	joins := map[time.Duration]*join.Result{}
	for i := range res.Pairs {
		pr := &res.Pairs[i]
		T := pr.Pair.Interval
		j := joins[T]
		if j == nil {
			var err error
			if j, err = join.Files(pcapA, pcapB, c.CaptureConfig(), int64(T)); err != nil {
				return fmt.Errorf("testbed: join tcpdump captures: %w", err)
			}
			joins[T] = j
		}
		if i == 0 {
			res.JoinPackets, res.JoinUnmatched, res.JoinDup = j.Packets, j.Unmatched, j.Duplicates
			res.JoinMatched = 0
			var means []float64
			for _, f := range j.Sorted() {
				res.JoinMatched += f.Received
				if f.Interval >= pr.FirstIv && f.Interval <= pr.LastIv && f.Sent >= 100 && f.Received > 0 {
					means = append(means, f.MeanNS/1e6)
				}
			}
			if len(means) > 0 {
				sort.Float64s(means)
				res.FlowDelayMinMS, res.FlowDelayMedMS, res.FlowDelayMaxMS = means[0], means[len(means)/2], means[len(means)-1]
			}
		}
		for _, f := range j.Sorted() {
			if f.Interval >= pr.FirstIv && f.Interval <= pr.LastIv {
				pr.Truth = append(pr.Truth, truthRecord(f, int64(T)))
			}
		}
		recs, err := eval.ReadResultsFile(realResultsPath(res.Dir, pr.Pair))
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Interval >= pr.FirstIv && r.Interval <= pr.LastIv {
				pr.Results = append(pr.Results, r)
			}
		}
		if pr.Report, err = eval.Evaluate(pr.Truth, map[string][]results.FlowRecord{"lds": pr.Results}); err != nil {
			return err
		}
		pr.Score = scoreReal(pr)
	}
	var err error
	res.PacketDelayP50MS, res.PacketDelayP99MS, res.PacketDelayMaxMS, err = packetDelaysMS(pcapA, pcapB, c)
	return err
}

// packetDelaysMS returns the median, the 99th percentile and the
// largest one-way delay of the packets that reached tap B (all intervals).
func packetDelaysMS(pcapA, pcapB string, c config.Common) (p50, p99, maxMS float64, err error) {
	p, err := capture.NewParser(c.CaptureConfig())
	if err != nil {
		return 0, 0, 0, err
	}
	m, err := join.MatchFiles(pcapA, pcapB, p)
	if err != nil {
		return 0, 0, 0, err
	}
	var ds []float64
	err = capture.EachPacket(pcapA, p, func(pk *capture.Packet) bool {
		if recv, got, ok := m.Lookup(pk.Key, pk.PktHash); ok && got {
			ds = append(ds, float64(recv-pk.TS)/1e6)
		}
		return true
	})
	if err != nil || len(ds) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), err
	}
	sort.Float64s(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1], nil
}

// scoreReal counts what the acceptance asks about (see RealScore).
func scoreReal(pr *RealPairResult) RealScore {
	s := RealScore{Statuses: map[results.Status]int{}}
	recs := map[join.FlowID]*results.FlowRecord{}
	for i := range pr.Results {
		r := &pr.Results[i]
		recs[join.FlowID{Interval: r.Interval, Key: r.Key}] = r
		if r.Status != results.StatusMeasured {
			s.Statuses[r.Status]++
		}
	}
	s.Records = len(pr.Truth)
	for _, t := range pr.Truth {
		k, _ := t.Key() // the truth comes from the join: its keys parse
		r := recs[join.FlowID{Interval: t.Interval, Key: k}]
		loss := r != nil && r.Loss != nil && *r.Loss >= 0.5
		delay := r != nil && r.DelayNS != nil && !math.IsNaN(*r.DelayNS)
		big := t.Sent >= 100
		if big {
			s.Big++
		}
		if t.Lost == 0 {
			if loss {
				s.FalseLossAll++
			}
			if big {
				s.BigLossFree++
				if loss {
					s.FalseLossBig++
				}
				if delay {
					s.LossFreeBigCovered++
				}
			}
			continue
		}
		s.Lossy++
		switch {
		case loss:
			s.LossyDetected++
		case r != nil && r.Status == results.StatusBeyondWindow:
			s.LossyWithheld++
		}
		if big {
			s.LossyBig++
			if loss {
				s.LossyBigDetected++
			}
		}
	}
	s.MedianRelBig, s.MedianRel1000, s.MedianRel100 = math.NaN(), math.NaN(), math.NaN()
	for _, run := range pr.Report.Runs {
		if run.Label != "lds" {
			continue
		}
		s.Spurious = run.Spurious
		for _, b := range run.Bins {
			med := math.NaN()
			if b.Covered > 0 {
				med = b.MedianRelDelay
			}
			switch b.Bin {
			case ">=100":
				s.BigDelayFlows, s.BigCovered, s.MedianRelBig = b.DelayFlows, b.Covered, med
			case ">=1000":
				s.MedianRel1000 = med
			case "100-999":
				s.MedianRel100 = med
			}
		}
	}
	return s
}

func execCommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	return cmd
}

// Refusal is how a daemon reacted to a capture interface it should refuse.
type Refusal struct {
	Daemon  string
	Exited  bool   // the process ended within the wait
	ExitErr error  // its exit status (nil: exit 0)
	Log     string // its log
	// Advice is the ethtool command the refusal named; AdviceWorks says
	// the daemon, started again after running it, kept running (else
	// AdviceLog is its log).
	Advice      string
	AdviceWorks bool
	AdviceLog   string
}

// RunRealGRO builds the topology with `gro on` at both taps, starts the
// receiver (tap B) and the sender (tap A) of pair pr, and reports for each
// whether it exited within wait, with its log. The namespaces are deleted
// before it returns.
func RunRealGRO(ctx context.Context, opt RealOptions, pr RealPair, wait time.Duration) (out []Refusal, err error) {
	dir := opt.WorkDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	topo, err := NewRealTopology(opt.Prefix, opt.Bottleneck, true)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, topo.Close()) }()
	for _, x := range []struct{ ns, ifc string }{{topo.Rtr, IfRealTapA}, {topo.Rcv, IfRealTapB}} {
		out, _ := exec.Command("ip", "netns", "exec", x.ns, "ethtool", "-k", x.ifc).CombinedOutput()
		if !strings.Contains(string(out), "generic-receive-offload: on") {
			return nil, fmt.Errorf("testbed: %s in %s does not report gro on after `ethtool -K %s gro on`:\n%s", x.ifc, x.ns, x.ifc, out)
		}
	}
	pki, err := NewPKI(dir, net.IP(DstCtl.AsSlice()))
	if err != nil {
		return nil, err
	}
	sCfg, rCfg := filepath.Join(dir, "sender-"+pr.Name+".yaml"), filepath.Join(dir, "receiver-"+pr.Name+".yaml")
	if err := writeRealConfigs(opt, pki, 0, pr, sCfg, rCfg); err != nil {
		return nil, err
	}
	ps := &procSet{dir: dir}
	defer func() { _ = ps.stopAll() }()
	for _, d := range []struct{ ns, name, cfg string }{
		{topo.Rcv, "lds-receiver", rCfg}, {topo.Rtr, "lds-sender", sCfg},
	} {
		p, err := ps.start(d.ns, d.name+"-"+pr.Name, filepath.Join(opt.BinDir, d.name), "--config", d.cfg)
		if err != nil {
			return out, err
		}
		r := Refusal{Daemon: d.name}
		select {
		case e := <-p.done:
			p.done <- e
			r.Exited, r.ExitErr = true, e
		case <-time.After(wait):
		case <-ctx.Done():
			return out, ctx.Err()
		}
		r.Log = tail(p.log, 4000)
		if r.Exited {
			if err := followAdvice(ctx, ps, d.ns, d.name+"-"+pr.Name+"-advised", &r, filepath.Join(opt.BinDir, d.name), d.cfg); err != nil {
				return out, err
			}
		}
		out = append(out, r)
	}
	return out, nil
}

var ethtoolAdviceRe = regexp.MustCompile(`ethtool -K (\S+)((?: [a-z-]+ off)+)`)

// followAdvice runs the ethtool command a refusal names, in the daemon's
// namespace, starts the daemon again and records whether it keeps
// running for a few seconds (the advice was true).
func followAdvice(ctx context.Context, ps *procSet, ns, name string, r *Refusal, bin, cfg string) error {
	m := ethtoolAdviceRe.FindStringSubmatch(r.Log)
	if m == nil {
		return nil
	}
	r.Advice = m[0]
	if err := nsRun(ns, strings.Fields(m[0])...); err != nil {
		return err
	}
	p, err := ps.start(ns, name, bin, "--config", cfg)
	if err != nil {
		return err
	}
	select {
	case e := <-p.done:
		p.done <- e
		r.AdviceLog = tail(p.log, 2000)
	case <-time.After(5 * time.Second):
		r.AdviceWorks = true
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// startTapCaptures starts tcpdump at tap A (the router's ingress) and tap B
// (the receiver's), the truth of every real-traffic run, and returns their
// capture files once both are listening.
func startTapCaptures(ps *procSet, topo *RealTopology, dir string) (pcapA, pcapB string, err error) {
	pcapA, pcapB = filepath.Join(dir, "tap-a.pcap"), filepath.Join(dir, "tap-b.pcap")
	filter := fmt.Sprintf("ip and src net %s and dst net %s", RealSndNet, RealRcvNet)
	for _, td := range []struct{ ns, ifc, name, file string }{{topo.Rtr, IfRealTapA, "tcpdump-a", pcapA}, {topo.Rcv, IfRealTapB, "tcpdump-b", pcapB}} {
		p, err := ps.start(td.ns, td.name, "tcpdump", "-n", "-i", td.ifc, "-Q", "in", "-s", "256", "-B", "32768",
			"--time-stamp-precision=nano", "-Z", "root", "-w", td.file, filter)
		if err != nil {
			return "", "", err
		}
		if err := p.waitLog("listening on", 10*time.Second); err != nil {
			return "", "", err
		}
	}
	return pcapA, pcapB, nil
}
