package ptp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// needE2E skips loudly, or fails when LDS_E2E_REQUIRED=1.
func needE2E(t *testing.T, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("LDS_E2E_REQUIRED") == "1" {
		t.Fatalf("LDS_E2E_REQUIRED=1 but %s", why)
	}
	t.Skipf("SKIPPING real-ptp4l test: %s (set LDS_E2E_REQUIRED=1 to make this a failure)", why)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// capSysTime is CAP_SYS_TIME's bit in /proc/PID/status masks.
const capSysTime = 25

// assertNoSysTime makes sure ptp4l (after ip netns exec → setpriv → exec)
// cannot set or slew the clock of the machine running the test.
func assertNoSysTime(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			t.Fatalf("ptp4l (pid %d) is gone: %v", pid, err)
		}
		if strings.TrimSpace(string(comm)) == "ptp4l" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never became ptp4l (comm %q)", pid, comm)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	seen := 0
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(k, "Cap") || k == "CapAmb" && strings.TrimSpace(v) == "" {
			continue
		}
		mask, ok := new(big.Int).SetString(strings.TrimSpace(v), 16)
		if !ok {
			t.Fatalf("cannot parse %s %q", k, v)
		}
		if mask.Bit(capSysTime) != 0 {
			t.Fatalf("ptp4l pid %d has CAP_SYS_TIME in %s (%s): refusing to run it", pid, k, strings.TrimSpace(v))
		}
		seen++
	}
	if seen < 4 {
		t.Fatalf("read only %d capability masks of pid %d", seen, pid)
	}
}

// ptp4lProc is one ptp4l in a namespace, stdout+stderr to a log file.
type ptp4lProc struct {
	cmd *exec.Cmd
	log string
}

func startPtp4l(t *testing.T, ns, veth, cfg, logPath string) *ptp4lProc {
	t.Helper()
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// setpriv drops CAP_SYS_TIME from the bounding and inheritable sets
	// before exec'ing ptp4l; free_running 1 in cfg is the second guard.
	cmd := exec.Command("ip", "netns", "exec", ns,
		"setpriv", "--bounding-set", "-sys_time", "--inh-caps", "-sys_time",
		"ptp4l", "-f", cfg, "-i", veth, "-2", "-S", "-m")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("starting ptp4l in %s: %v", ns, err)
	}
	lf.Close()
	p := &ptp4lProc{cmd: cmd, log: logPath}
	t.Cleanup(p.kill)
	assertNoSysTime(t, cmd.Process.Pid)
	return p
}

func (p *ptp4lProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

func (p *ptp4lProc) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// clockIDFromMAC is how linuxptp derives a clock identity from an EUI-48
// (FF FE inserted in the middle), in pmc's text form.
func clockIDFromMAC(t *testing.T, ns, dev string) string {
	t.Helper()
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(run(t, "ip", "-n", ns, "-j", "link", "show", "dev", dev)), &links); err != nil || len(links) != 1 {
		t.Fatalf("reading MAC of %s in %s: %v %v", dev, ns, err, links)
	}
	mac, err := net.ParseMAC(links[0].Address)
	if err != nil || len(mac) != 6 {
		t.Fatalf("MAC %q: %v", links[0].Address, err)
	}
	return fmt.Sprintf("%02x%02x%02x.fffe.%02x%02x%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5])
}

// pmcGet asks ptp4l through linuxptp's own pmc: an independent decoder.
func pmcGet(t *testing.T, socket, what string) string {
	t.Helper()
	client := filepath.Join(filepath.Dir(socket), "pmc.sock")
	return run(t, "pmc", "-u", "-b", "0", "-s", socket, "-i", client, "GET "+what)
}

func pmcField(t *testing.T, out, field string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + field + `\s+(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("pmc output lacks %s:\n%s", field, out)
	}
	return m[1]
}

// waitState polls until the checker reports want, returning the time it took.
func waitState(t *testing.T, c *Checker, want State, limit time.Duration, procs ...*ptp4lProc) (time.Duration, Status) {
	t.Helper()
	start := time.Now()
	var s Status
	for time.Since(start) < limit {
		s, _ = c.Poll(context.Background())
		if s.State == want {
			return time.Since(start), s
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range procs {
		t.Logf("%s:\n%s", p.log, p.tail())
	}
	t.Fatalf("state %q not reached within %s; last status %+v", want, limit, s)
	return 0, s
}

func writePtp4lConf(t *testing.T, path, uds string, extra ...string) {
	t.Helper()
	conf := []string{
		"[global]",
		"free_running 1", // never touch the clock, whatever the caps
		"logAnnounceInterval -3",
		"logSyncInterval -4",
		"logMinDelayReqInterval -4",
		"announceReceiptTimeout 3",
		"uds_address " + uds,
	}
	conf = append(conf, extra...)
	if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRealPtp4l runs a ptp4l master and a ptp4l slave in two network
// namespaces joined by a veth (L2 transport, software timestamps,
// free_running, CAP_SYS_TIME dropped) and checks the checker against them.
func TestRealPtp4l(t *testing.T) {
	needE2E(t, os.Geteuid() == 0, "needs root for network namespaces")
	for _, bin := range []string{"ptp4l", "pmc", "setpriv", "ip"} {
		_, err := exec.LookPath(bin)
		needE2E(t, err == nil, bin+" not found (apt-get install -y linuxptp util-linux iproute2)")
	}
	t0 := time.Now()

	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("ldsptp-%d-a", pid), fmt.Sprintf("ldsptp-%d-b", pid)
	vA, vB := fmt.Sprintf("lpa%d", pid), fmt.Sprintf("lpb%d", pid)
	run(t, "ip", "netns", "add", nsA)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsA).Run() })
	run(t, "ip", "netns", "add", nsB)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsB).Run() })
	run(t, "ip", "link", "add", vA, "netns", nsA, "type", "veth", "peer", "name", vB, "netns", nsB)
	for _, nv := range [][2]string{{nsA, vA}, {nsB, vB}} {
		run(t, "ip", "-n", nv[0], "link", "set", "lo", "up")
		run(t, "ip", "-n", nv[0], "link", "set", nv[1], "up")
	}

	dir, err := os.MkdirTemp("", "ldsptp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	masterSock, slaveSock := filepath.Join(dir, "m.sock"), filepath.Join(dir, "s.sock")
	masterCfg, slaveCfg := filepath.Join(dir, "m.cfg"), filepath.Join(dir, "s.cfg")
	writePtp4lConf(t, masterCfg, masterSock, "priority1 10")
	writePtp4lConf(t, slaveCfg, slaveSock, "slaveOnly 1")
	wantGM := clockIDFromMAC(t, nsA, vA)

	master := startPtp4l(t, nsA, vA, masterCfg, filepath.Join(dir, "m.log"))
	slave := startPtp4l(t, nsB, vB, slaveCfg, filepath.Join(dir, "s.log"))

	cfg := DefaultConfig()
	cfg.Socket = slaveSock
	cfg.PollInterval = 100 * time.Millisecond
	cfg.Timeout = 300 * time.Millisecond
	cfg.Grace = time.Second
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	// 1. Synchronisation.
	took, s := waitState(t, c, StateSynced, 15*time.Second, master, slave)
	t.Logf("phase 1: synced %s after the slave started: gm %s port %s offset %dns path delay %dns", took, s.GrandmasterID, s.PortState, s.OffsetNS, s.MeanPathDelayNS)
	if s.GrandmasterID != wantGM {
		t.Errorf("grandmaster %q, want the master's identity %q (from its MAC)", s.GrandmasterID, wantGM)
	}
	if s.PortState != "UNCALIBRATED" {
		t.Errorf("port state %q: a free_running slave should stay UNCALIBRATED", s.PortState)
	}
	if s.StepsRemoved != 1 || s.Interface != vB {
		t.Errorf("stepsRemoved %d interface %q, want 1 and %s", s.StepsRemoved, s.Interface, vB)
	}
	// Both ptp4l read the same kernel clock: the true offset is zero.
	if absDur(s.OffsetNS) >= time.Millisecond || s.MeanPathDelayNS < 0 || s.MeanPathDelayNS >= int64(time.Millisecond) {
		t.Errorf("offset %dns, path delay %dns: not plausible for one clock over a veth", s.OffsetNS, s.MeanPathDelayNS)
	}
	out := pmcGet(t, slaveSock, "TIME_STATUS_NP")
	if got := pmcField(t, out, "gmIdentity"); got != s.GrandmasterID {
		t.Errorf("pmc says gmIdentity %s, checker %s", got, s.GrandmasterID)
	}
	if got := pmcField(t, pmcGet(t, slaveSock, "PORT_PROPERTIES_NP"), "portState"); got != s.PortState {
		t.Errorf("pmc says portState %s, checker %s", got, s.PortState)
	}

	// 2. The master dies: announce receipt timeout (3 x 125 ms) moves the
	// slave port to LISTENING.
	master.kill()
	took, s = waitState(t, c, StateUnsynced, 10*time.Second, slave)
	t.Logf("phase 2: unsynced %s after killing the master: port %s, gmPresent %v, err %q", took, s.PortState, s.GrandmasterPresent, s.Err)
	if !s.Reachable {
		t.Errorf("slave ptp4l should still answer: %+v", s)
	}

	// 3. The master comes back.
	master = startPtp4l(t, nsA, vA, masterCfg, filepath.Join(dir, "m2.log"))
	took, s = waitState(t, c, StateSynced, 15*time.Second, master, slave)
	t.Logf("phase 3: synced again %s after restarting the master", took)

	// 4. The slave's ptp4l dies: the last answer holds for the grace
	// period, then unsynced.
	lastOK := s.LastOK
	slave.kill()
	took, s = waitState(t, c, StateUnsynced, 10*time.Second)
	sinceOK := time.Since(lastOK)
	t.Logf("phase 4: unsynced %s after killing the slave ptp4l (%s after its last answer; grace %s): err %q", took, sinceOK, cfg.Grace, s.Err)
	if s.Reachable || !strings.Contains(s.Err, slaveSock) {
		t.Errorf("want unreachable with an error naming %s: %+v", slaveSock, s)
	}
	if sinceOK < cfg.Grace {
		t.Errorf("went unsynced %s after the last answer, before the %s grace", sinceOK, cfg.Grace)
	}
	t.Logf("total %s", time.Since(t0))
}
