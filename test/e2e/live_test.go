package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// needLive skips (or fails under LDS_E2E_REQUIRED=1) when the live
// testbed cannot run here: root, ip, tcpdump and the extra tools.
func needLive(t *testing.T, tools ...string) {
	t.Helper()
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "needs root (network namespaces, veth, AF_PACKET)"
	case testing.Short():
		why = "skipped in -short mode (takes ~20 s)"
	default:
		for _, tool := range append([]string{"ip", "tcpdump"}, tools...) {
			if _, err := exec.LookPath(tool); err != nil {
				why = "needs " + tool + " (apt-get install " + debPackage(tool) + "; `make deps` installs every test package)"
			}
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("LDS_E2E_REQUIRED") == "1" && !testing.Short() {
		t.Fatalf("LDS_E2E_REQUIRED=1 but the live testbed %s", why)
	}
	t.Skipf("SKIPPED: live end-to-end testbed %s", why)
}

// debPackage names the Debian package of a tool the live tests run.
func debPackage(tool string) string {
	switch tool {
	case "ip", "tc":
		return "iproute2"
	case "ping":
		return "iputils-ping"
	}
	return tool // tcpdump, iperf3, curl, ethtool
}

// buildDaemons builds the three programs the testbed runs, as users get them.
func buildDaemons(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/",
		"github.com/lds-net/lds/cmd/lds-sender", "github.com/lds-net/lds/cmd/lds-receiver", "github.com/lds-net/lds/cmd/lds-linkem")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// prepareRun builds the daemons and picks the work directory (dirEnv keeps
// it after the test, for a look at the logs) and the namespace prefix
// (prefixEnv lets the driving script delete the namespaces if a run is cut
// short).
func prepareRun(t *testing.T, dirEnv, prefixEnv, prefix string) (bin, work, pfx string, log *slog.Logger) {
	t.Helper()
	bin, work, pfx = buildDaemons(t), t.TempDir(), prefix
	if d := os.Getenv(dirEnv); d != "" {
		work = filepath.Clean(d)
	}
	if p := os.Getenv(prefixEnv); p != "" {
		pfx = p
	}
	return bin, work, pfx, slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

func runLive(t *testing.T, opt Options) *Result {
	t.Helper()
	opt.BinDir, opt.WorkDir, opt.Prefix, opt.Log = prepareRun(t, "LDS_TESTBED_DIR", "LDS_TESTBED_PREFIX",
		fmt.Sprintf("ldstb-%d-%d", os.Getpid(), time.Now().UnixNano()%100000))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, opt)
	if err != nil {
		t.Fatalf("testbed run (files in %s): %v", opt.WorkDir, err)
	}
	var b bytes.Buffer
	if err := res.WriteMarkdown(&b, opt); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", b.String())
	if p := os.Getenv("LDS_TESTBED_REPORT"); p != "" {
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// check asserts what every live run must show: complete taps, no false
// loss, coverage and median delay error of all flows and of the large
// ones against the tcpdump join, and total loss close to the truth.
func check(t *testing.T, res *Result) {
	t.Helper()
	if res.Traffic.Sent == 0 || res.Traffic.SendErrors != 0 {
		t.Fatalf("generator: %+v", res.Traffic)
	}
	// Tap A (tcpdump on mid's ingress) must have every generated packet,
	// or the truth itself is incomplete.
	if res.JoinPackets != res.Traffic.Sent {
		t.Fatalf("tcpdump at tap A saw %d packets, the generator sent %d", res.JoinPackets, res.Traffic.Sent)
	}
	if f := res.Linkem.Forward; f.Overflow != 0 || f.Truncated != 0 || f.SendErrors != 0 {
		t.Fatalf("emulator dropped frames for its own reasons: %+v", f)
	}
	// Every loss at tap B is the emulator's doing (it also saw the
	// warm-up interval, so compare over every interval).
	if lost := res.JoinPackets - res.JoinMatched; lost != res.Linkem.Forward.Lost {
		t.Fatalf("truth lost %d packets, the emulator dropped %d (a tap or the relay lost packets)", lost, res.Linkem.Forward.Lost)
	}
	all, ok := res.Bin("all")
	if !ok {
		t.Fatal("no 'all' bin for the lds run")
	}
	if all.Reported == 0 {
		t.Fatalf("no result record matched a truth record (%d results)", len(res.Results))
	}
	if all.FalseLoss != 0 {
		t.Errorf("%d flows reported loss where the truth has none", all.FalseLoss)
	}
	if all.MissedLoss > all.LossFlows/10 {
		t.Errorf("%d of %d flows with loss were reported without loss", all.MissedLoss, all.LossFlows)
	}
	// Lossy flows are reported (loss, packets) but may lack a delay with
	// vlda k = 1; flows without loss must nearly all get one.
	cv := res.Coverage(10)
	if cv.Flows == 0 || float64(cv.Covered) < 0.9*float64(cv.Flows) {
		t.Errorf("delay coverage of loss-free flows with >= 10 packets: %d of %d, want >= 90%%", cv.Covered, cv.Flows)
	}
	// Every covered flow, whatever its size: where a flow has cells of
	// its own the sketch's mean is the exact mean of the same packets
	// tcpdump saw (both read the kernel's timestamps), so most errors are
	// rounding. TestLive measures a median of 0 (p95 2e-16) over 762
	// flows; a median above 0.1 % is a bias of every published delay.
	if all.Covered < 100 || all.MedianRelDelay > 0.001 {
		t.Errorf("median relative delay error over all %d covered flows: %.3g, want <= 0.001 over >= 100 flows", all.Covered, all.MedianRelDelay)
	}
	big, _ := res.Bin(">=100")
	if big.DelayFlows == 0 || big.Covered == 0 {
		t.Fatalf("no flow with >= 100 packets and a delay estimate in an interval (%d flows): nothing to judge", big.DelayFlows)
	}
	if big.MedianRelDelay > 0.05 {
		t.Errorf("median relative delay error of flows with >= 100 packets: %.4f, want <= 0.05", big.MedianRelDelay)
	}
	est, tl := res.Totals()
	if d := est - tl; d > 0.2*tl+5 || d < -0.2*tl-5 {
		t.Errorf("estimated total loss %.1f, truth %.0f: off by more than 20%% + 5", est, tl)
	}
}

// TestLive is the small live run of `make test`: 4 intervals of 1 s at
// 3000 packets/s.
func TestLive(t *testing.T) {
	needLive(t)
	check(t, runLive(t, DefaultOptions()))
}

// TestLiveLong is the longer run of scripts/e2e-live.sh (LDS_E2E_LONG=1;
// LDS_TESTBED_INTERVALS, LDS_TESTBED_PPS, LDS_TESTBED_FLOWS override).
func TestLiveLong(t *testing.T) {
	if os.Getenv("LDS_E2E_LONG") != "1" {
		t.Skip("SKIPPED: the long live run needs LDS_E2E_LONG=1 (scripts/e2e-live.sh sets it)")
	}
	needLive(t)
	opt := DefaultOptions()
	opt.Intervals, opt.Traffic.PPS, opt.Traffic.Flows = 20, 10000, 1000
	for env, p := range map[string]*int{"LDS_TESTBED_INTERVALS": &opt.Intervals, "LDS_TESTBED_PPS": &opt.Traffic.PPS, "LDS_TESTBED_FLOWS": &opt.Traffic.Flows} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s=%q: %v", env, v, err)
			}
			*p = n
		}
	}
	check(t, runLive(t, opt))
}
