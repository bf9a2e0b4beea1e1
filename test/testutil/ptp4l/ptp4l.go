// Package ptp4l runs real linuxptp ptp4l instances for tests: a master and a
// slave in two network namespaces joined by a veth, L2 transport, software
// timestamps, `free_running 1`, and CAP_SYS_TIME dropped (checked after
// exec), so that nothing can step or slew this machine's clock.
package ptp4l

import (
	"bufio"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/test/testutil"
)

// Require skips (or fails under LDS_E2E_REQUIRED=1) without root or the tools.
func Require(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	for _, bin := range []string{"ptp4l", "pmc", "setpriv", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			testutil.SkipOrFail(t, "%s not found (apt-get install -y linuxptp util-linux iproute2)", bin)
		}
	}
}

// Run runs a command and fails the test on error.
func Run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// capSysTime is CAP_SYS_TIME's bit in /proc/PID/status masks.
const capSysTime = 25

// AssertNoSysTime makes sure ptp4l (after ip netns exec → setpriv → exec)
// cannot set or slew the clock of the machine running the test.
func AssertNoSysTime(t *testing.T, pid int) {
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

// Proc is one ptp4l in a namespace, stdout+stderr to a log file.
type Proc struct {
	cmd *exec.Cmd
	Log string
}

// Start runs ptp4l with cfg on veth in namespace ns.
func Start(t *testing.T, ns, veth, cfg, logPath string) *Proc {
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
	p := &Proc{cmd: cmd, Log: logPath}
	t.Cleanup(p.Kill)
	AssertNoSysTime(t, cmd.Process.Pid)
	return p
}

// Kill stops the process (idempotent).
func (p *Proc) Kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// Tail is the end of the log, for failure messages.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// WriteConf writes a ptp4l configuration with free_running 1 and fast
// message intervals, plus extra lines.
func WriteConf(t *testing.T, path, uds string, extra ...string) {
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

// Pair is a master and a slave joined by a veth between two namespaces.
type Pair struct {
	NSMaster, NSSlave     string
	VethMaster, VethSlave string
	Dir                   string
	MasterSock, SlaveSock string
	MasterConf, SlaveConf string
	Master, Slave         *Proc
}

// StartPair sets up the namespaces and starts both ptp4l; everything is
// removed when the test ends.
func StartPair(t *testing.T, tag string) *Pair {
	t.Helper()
	pid := os.Getpid()
	p := &Pair{NSMaster: fmt.Sprintf("lds%s-%d-a", tag, pid), NSSlave: fmt.Sprintf("lds%s-%d-b", tag, pid),
		VethMaster: fmt.Sprintf("l%sa%d", tag, pid), VethSlave: fmt.Sprintf("l%sb%d", tag, pid)}
	Run(t, "ip", "netns", "add", p.NSMaster)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.NSMaster).Run() })
	Run(t, "ip", "netns", "add", p.NSSlave)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.NSSlave).Run() })
	Run(t, "ip", "link", "add", p.VethMaster, "netns", p.NSMaster, "type", "veth", "peer", "name", p.VethSlave, "netns", p.NSSlave)
	for _, nv := range [][2]string{{p.NSMaster, p.VethMaster}, {p.NSSlave, p.VethSlave}} {
		Run(t, "ip", "-n", nv[0], "link", "set", "lo", "up")
		Run(t, "ip", "-n", nv[0], "link", "set", nv[1], "up")
	}
	dir, err := os.MkdirTemp("", "ldsptp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p.Dir = dir
	p.MasterSock, p.SlaveSock = filepath.Join(dir, "m.sock"), filepath.Join(dir, "s.sock")
	p.MasterConf, p.SlaveConf = filepath.Join(dir, "m.cfg"), filepath.Join(dir, "s.cfg")
	WriteConf(t, p.MasterConf, p.MasterSock, "priority1 10")
	WriteConf(t, p.SlaveConf, p.SlaveSock, "slaveOnly 1")
	p.Master = Start(t, p.NSMaster, p.VethMaster, p.MasterConf, filepath.Join(dir, "m.log"))
	p.Slave = Start(t, p.NSSlave, p.VethSlave, p.SlaveConf, filepath.Join(dir, "s.log"))
	return p
}

// RestartMaster starts the master again after a Kill.
func (p *Pair) RestartMaster(t *testing.T, logName string) {
	t.Helper()
	p.Master = Start(t, p.NSMaster, p.VethMaster, p.MasterConf, filepath.Join(p.Dir, logName))
}
