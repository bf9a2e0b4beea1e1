package receiver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/receiver"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sender"
	"github.com/lds-net/lds/test/testutil"
	"github.com/lds-net/lds/tools/gen"
	"github.com/lds-net/lds/tools/join"
)

// TestRealPrometheusScrapesReceiver: a real Prometheus server scrapes a
// receiver fed by a replay of generated captures; its HTTP API must hold
// the per-flow and link series with the values of the exact join.
func TestRealPrometheusScrapesReceiver(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		testutil.SkipOrFail(t, "prometheus not installed (Debian package prometheus)")
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sc := gen.DefaultScenario()
	sc.Duration, sc.Flows = 3*time.Second, 60
	sc.HeavyLoss = gen.HeavyLoss{}
	if _, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, log); err != nil {
		t.Fatal(err)
	}

	rc := config.DefaultReceiver()
	rc.Sketch.Seed = testSeed
	rc.Receiver.TLS.Plaintext = true
	rc.Receiver.Lateness = 2 * time.Second
	rc.PTP.Enabled = false
	rc.Capture.Source.Kind, rc.Capture.Source.File = "file", b
	rc.Metrics.TopN = 1000
	rc.Sample.LinkOneIn = rc.Sample.OneIn // every candidate in the link sample: ~1/4 of the packets
	if err := rc.Validate(); err != nil {
		t.Fatal(err)
	}
	grpcLis, _ := net.Listen("tcp", "127.0.0.1:0")
	httpLis, _ := net.Listen("tcp", "127.0.0.1:0")
	srcB, err := capture.OpenFile(b)
	if err != nil {
		t.Fatal(err)
	}
	first := readFirstTS(t, a)
	start := first / int64(time.Second) * int64(time.Second)
	rx, err := receiver.New(rc, receiver.Options{Sources: []capture.Source{srcB}, Listener: grpcLis, HTTPListener: httpLis, CaptureStart: start, Clock: traceClock(start)}, log)
	if err != nil {
		t.Fatal(err)
	}
	sc2 := config.DefaultSender()
	sc2.Common = rc.Common
	sc2.Capture.Source.File = a
	sc2.Sender.ID, sc2.Sender.Receiver, sc2.Sender.TLS.Plaintext = "edge-a", grpcLis.Addr().String(), true
	srcA, err := capture.OpenFile(a)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := sender.New(sc2, sender.Options{Sources: []capture.Source{srcA}, NoHTTP: true, CaptureStart: start}, log)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = rx.Run(ctx) }() // a failed daemon shows as the series missing below
	go func() { _ = tx.Run(ctx) }()

	promLis, _ := net.Listen("tcp", "127.0.0.1:0")
	promAddr := promLis.Addr().String()
	promLis.Close()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: lds\n    static_configs:\n      - targets: ['%s']\n", httpLis.Addr())
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, promBin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--enable-feature=native-histograms")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	truth, err := join.Files(a, b, rc.CaptureConfig(), int64(rc.Interval))
	if err != nil {
		t.Fatal(err)
	}
	// The receiver publishes the last complete interval's flows; wait until
	// Prometheus has scraped the sent-packets counter for every interval.
	var sentTotal uint64
	for _, f := range truth.Flows {
		sentTotal += f.Sent
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, ok := promScalar(t, promAddr, `sum(lds_link_sent_packets_total)`)
		if ok && uint64(v) == sentTotal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never saw %d sent packets (last %v, %v)", sentTotal, v, ok)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Per-flow series: the latest complete interval's delay of each flow
	// must match the join's mean delay (collision-free at this load).
	res := promVector(t, promAddr, `lds_flow_delay_seconds`)
	if len(res) == 0 {
		t.Fatal("no per-flow delay series in Prometheus")
	}
	ci := map[capture.FlowKey]float64{}
	for _, r := range promVector(t, promAddr, `lds_flow_delay_ci95_seconds`) {
		ci[flowKey(t, r.Metric)], _ = strconv.ParseFloat(r.Value[1].(string), 64)
	}
	checked, lossy, outside := 0, 0, 0
	for _, r := range res {
		k := flowKey(t, r.Metric)
		var best *join.Flow
		for id, f := range truth.Flows {
			if id.Key == k && (best == nil || f.Interval > best.Interval) {
				best = f
			}
		}
		if best == nil || best.Received < 20 {
			continue
		}
		got, _ := strconv.ParseFloat(r.Value[1].(string), 64)
		checked++
		if best.Lost() > 0 {
			// Lossy cells: the delay may come from the flow's joined
			// samples (docs/sampling.md, "Delay under loss"), a sample
			// of its packets: held to its own ci95, of which about one
			// in twenty may miss.
			lossy++
			// A delay repaired from the list of lost packets is exact,
			// with a ci95 of 0: allow the float rounding of its trip
			// through seconds and the exposition text (1e-12 relative).
			if math.Abs(got*1e9-best.MeanNS) > ci[k]*1e9+1e-12*best.MeanNS {
				outside++
				t.Logf("lossy flow %v: Prometheus has %v s ± %v, truth %v ns", k, got, ci[k], best.MeanNS)
			}
			continue
		}
		if math.Abs(got*1e9-best.MeanNS) > 1e-3*best.MeanNS+1 {
			t.Errorf("flow %v: Prometheus has %v s, truth %v ns", k, got, best.MeanNS)
		}
	}
	if outside*10 > lossy {
		t.Errorf("%d of %d lossy flows' delays outside their ci95", outside, lossy)
	}
	if checked < 5 {
		t.Errorf("only %d flows checked against truth", checked)
	}
	t.Logf("Prometheus: %d per-flow delay series, %d checked against the join (%d lossy, %d of them outside their ci95); %d packets sent", len(res), checked, lossy, outside, sentTotal)
	checkPacketHistogram(t, promAddr, a, b, rc.CaptureConfig())
}

// checkPacketHistogram: histogram_quantile over the scraped native
// histogram of the link sample's packet delays agrees with the exact
// per-packet quantiles of the join within one native bucket (factor
// 2^(1/8) at the configured bucket factor of 1.1).
func checkPacketHistogram(t *testing.T, promAddr, a, b string, cc capture.Config) {
	t.Helper()
	p, err := capture.NewParser(cc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := join.MatchFiles(a, b, p)
	if err != nil {
		t.Fatal(err)
	}
	delays := m.Delays()
	slices.Sort(delays)
	n, _ := promScalar(t, promAddr, `sum(histogram_count(lds_link_packet_delay_seconds))`)
	if n < 500 {
		t.Fatalf("native histogram holds %v link samples in Prometheus, want >= 500", n)
	}
	const bucket = 1.0905077326652577 // 2^(1/8): schema 3
	for _, q := range []float64{0.5, 0.9, 0.99} {
		got, ok := promScalar(t, promAddr, fmt.Sprintf(`histogram_quantile(%g, sum(lds_link_packet_delay_seconds))`, q))
		want := sample.Quantile(delays, q) / 1e9
		if !ok || got < want/bucket || got > want*bucket {
			t.Errorf("p%g of the packet delays: Prometheus %v s, truth %v s (%d packets): more than one bucket apart", 100*q, got, want, len(delays))
		}
		t.Logf("p%g: histogram_quantile %v s, truth %v s (%.1f%%), %v samples", 100*q, got, want, 100*(got/want-1), n)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

func promQuery(t *testing.T, addr, q string) []promSample {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil // no answer, as for an empty one: the callers hold what they need
	}
	return body.Data.Result
}

func promScalar(t *testing.T, addr, q string) (float64, bool) {
	r := promQuery(t, addr, q)
	if len(r) != 1 {
		return 0, false
	}
	v, err := strconv.ParseFloat(r[0].Value[1].(string), 64)
	return v, err == nil
}

func promVector(t *testing.T, addr, q string) []promSample { return promQuery(t, addr, q) }

func flowKey(t *testing.T, m map[string]string) capture.FlowKey {
	t.Helper()
	num := func(s string) uint64 { v, _ := strconv.ParseUint(m[s], 10, 16); return v }
	k, err := capture.FlowKeyFromAddrs(testutil.MustAddr(t, m["src"]), testutil.MustAddr(t, m["dst"]), uint8(num("proto")), uint16(num("sport")), uint16(num("dport")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}
