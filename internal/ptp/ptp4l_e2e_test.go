package ptp

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/test/testutil/ptp4l"
)

func run(t *testing.T, name string, args ...string) string { return ptp4l.Run(t, name, args...) }

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
func waitState(t *testing.T, c *Checker, want State, limit time.Duration, procs ...*ptp4l.Proc) (time.Duration, Status) {
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
		t.Logf("%s:\n%s", p.Log, p.Tail())
	}
	t.Fatalf("state %q not reached within %s; last status %+v", want, limit, s)
	return 0, s
}

// TestRealPtp4l runs a ptp4l master and a ptp4l slave in two network
// namespaces joined by a veth (L2 transport, software timestamps,
// free_running, CAP_SYS_TIME dropped) and checks the checker against them.
func TestRealPtp4l(t *testing.T) {
	ptp4l.Require(t)
	t0 := time.Now()
	pair := ptp4l.StartPair(t, "ptp")
	nsA, vA, vB := pair.NSMaster, pair.VethMaster, pair.VethSlave
	slaveSock := pair.SlaveSock
	wantGM := clockIDFromMAC(t, nsA, vA)
	master, slave := pair.Master, pair.Slave

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

	// 1b. ptp.phc auto against this ptp4l: its interface is a veth (no
	// PTP hardware clock; here it is not even in this test's namespace),
	// so the PHC cannot be read: the check must say so, naming the
	// interface, and refuse to call the clock synced rather than skip the
	// comparison. (No machine here has a PHC to read a real offset from.)
	phcCfg := cfg
	phcCfg.PHC = "auto"
	pc, err := New(phcCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := pc.Poll(context.Background())
	pc.Close()
	if ps.State != StateUnsynced || !strings.Contains(ps.PHCErr, vB) || !strings.Contains(ps.PHCErr, "no PHC") {
		t.Errorf("ptp.phc auto on a veth: state %s, PHCErr %q: want unsynced naming %s and the missing PHC", ps.State, ps.PHCErr, vB)
	}
	t.Logf("phase 1b: ptp.phc auto on a veth: %s (%s)", ps.State, ps.PHCErr)

	// 2. The master dies: announce receipt timeout (3 x 125 ms) moves the
	// slave port to LISTENING.
	master.Kill()
	took, s = waitState(t, c, StateUnsynced, 10*time.Second, slave)
	t.Logf("phase 2: unsynced %s after killing the master: port %s, gmPresent %v, err %q", took, s.PortState, s.GrandmasterPresent, s.Err)
	if !s.Reachable {
		t.Errorf("slave ptp4l should still answer: %+v", s)
	}

	// 3. The master comes back.
	pair.RestartMaster(t, "m2.log")
	master = pair.Master
	took, s = waitState(t, c, StateSynced, 15*time.Second, master, slave)
	t.Logf("phase 3: synced again %s after restarting the master", took)

	// 4. The slave's ptp4l dies: the last answer holds for the grace
	// period, then unsynced.
	lastOK := s.LastOK
	slave.Kill()
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
