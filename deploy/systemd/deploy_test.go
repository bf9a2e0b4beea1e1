package systemd

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/results"
	"github.com/lds-net/lds/test/e2e"
	"github.com/lds-net/lds/test/testutil"
	"github.com/lds-net/lds/test/testutil/ptp4l"
	"github.com/lds-net/lds/tools/eval"
	"github.com/lds-net/lds/tools/join"
)

// Addresses of the deployment: the hosts' management link (gRPC, PTP,
// metrics) and the receiver's name, as in the README's certificate.
const (
	addrA        = "10.77.0.1"
	addrB        = "10.77.0.2"
	receiverName = "receiver.example.net"
	senderID     = "edge-a" // the CN of the README's sender certificate
)

// TestTwoHostDeployment runs the README's deployment on two Debian 12 hosts
// booted with systemd (systemd-nspawn): the package of `make deb` installed
// with `dpkg -i` (which must create user lds and start nothing), the
// README's openssl certificates, configs edited as the
// README says, Debian's ptp4l@eth0 on both (slaves of a grandmaster on the
// management bridge; software timestamps, free_running 1, no CAP_SYS_TIME
// anywhere), `systemctl enable --now lds-receiver` / `lds-sender`. It
// checks the published delays against the tcpdump join, lds_ptp_state
// synced at both ends, every interval flagged clock_unsynced once the
// grandmaster stops, no "permission denied" in any journal, no restarts.
//
//	lds-a (sender)  eth0 ─┐                   ┌─ eth0  lds-b (receiver)
//	                      └── br0 (gm ns) ────┘
//	                           └─ gm0: ptp4l grandmaster
//	lds-a tap0 ──────────── veth ──────────── tap0 lds-b
//	(traffic generator and tcpdump at both taps run from the test)
func TestTwoHostDeployment(t *testing.T) {
	needDeploy(t)
	began := time.Now()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if d := os.Getenv("LDS_DEPLOY_DIR"); d != "" { // keep the hosts' files for a look after the test
		work = d
	}

	// The package and the image in parallel: both take tens of seconds.
	built := make(chan error, 1)
	go func() {
		out, err := exec.Command("make", "-C", repo, "deb").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("make deb: %w\n%s", err, out)
		}
		built <- err
	}()
	cache := rootfsCache(t)
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	deb := builtDeb(t, repo)
	describe := strings.TrimSpace(mustOut(t, "git", "-C", repo, "describe", "--tags", "--always", "--dirty"))
	t.Logf("image and build ready after %s", time.Since(began).Round(time.Second))

	net := newDeployNet(t)
	// The hosts' roots next to the cache: same file system (reflinks where
	// it has them), and not in a small tmpfs /tmp.
	roots := work
	if os.Getenv("LDS_DEPLOY_DIR") == "" {
		if roots, err = os.MkdirTemp(filepath.Dir(filepath.Dir(cache)), "hosts-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(roots) })
	}
	a := newHost(t, cache, roots, "lds-a", net.a)
	b := newHost(t, cache, roots, "lds-b", net.b)
	for _, h := range []*host{a, b} {
		// ptp4l@eth0 as a slave; software timestamps, L2; free_running 1:
		// it measures and never touches the clock.
		setConfKeys(t, h.path("/etc/linuxptp/ptp4l.conf"), append([][2]string{
			{"slaveOnly", "1"}, {"free_running", "1"}, {"time_stamping", "software"}, {"network_transport", "L2"}}, ptpRates...))
	}
	a.write("/etc/hosts", "127.0.0.1\tlocalhost\n"+addrB+"\t"+receiverName+"\n", 0o644)

	gm := net.startGrandmaster(t, work)
	a.start(net.a)
	b.start(net.b)
	// Both power off at once at the end (each host's own cleanup waits).
	t.Cleanup(func() { a.poweroff(); b.poweroff() })
	a.waitUp()
	b.waitUp()
	a.assertNoSysTime()
	b.assertNoSysTime()
	t.Logf("hosts up after %s", time.Since(began).Round(time.Second))

	// README "Install": the package, on the running hosts.
	for _, h := range []*host{a, b} {
		installDeb(t, h, deb, describe)
	}
	pki := makePKI(t, work)
	seed := strings.TrimSpace(mustOut(t, "openssl", "rand", "-hex", "16"))
	installPKI(t, a, pki, "sender")
	installPKI(t, b, pki, "receiver")
	configure(t, a, b, seed)
	reinstall(t, a, deb, "/etc/lds/sender.yaml", seed)
	for _, h := range []*host{a, b} {
		h.must("systemctl", "enable", "--now", "ptp4l@eth0")
		// The drop-in handed ptp4l's socket to group lds.
		waitFor(t, 15*time.Second, h.name+": /var/run/ptp4l group lds", func() (bool, string) {
			out, _ := h.run("stat", "-c", "%G %A", "/var/run/ptp4l")
			return strings.HasPrefix(out, "lds srw-rw"), out + h.journal("ptp4l@eth0")
		})
	}

	recvRestarts := tapDownAtBoot(t, b)
	a.must("systemctl", "enable", "--now", "lds-sender")
	waitFor(t, 30*time.Second, "sender connected", func() (bool, string) {
		m := b.metrics(9465)
		return strings.Contains(m, `lds_sender_connected{sender="`+senderID+`"} 1`), a.journal("lds-sender") + b.journal("lds-receiver")
	})
	waitFor(t, 30*time.Second, "lds_ptp_state synced at both ends", func() (bool, string) {
		ms, mr := a.metrics(9466), b.metrics(9465)
		return strings.Contains(ms, `lds_ptp_state{state="synced"} 1`) &&
				strings.Contains(mr, `lds_ptp_state{end="receiver",sender="",state="synced"} 1`),
			grep(ms, "lds_ptp_") + grep(mr, "lds_ptp_") + a.journal("lds-sender") + b.journal("lds-receiver")
	})
	t.Logf("both ends synced after %s", time.Since(began).Round(time.Second))

	rcfg := loadReceiverConfig(t, b)
	T := rcfg.Interval
	resultsPath := b.path("/var/lib/lds/results.jsonl")

	// Synced: delays published and equal to the tcpdump truth.
	pcapA, pcapB := filepath.Join(work, "tap-a.pcap"), filepath.Join(work, "tap-b.pcap")
	stopA := tcpdump(t, net.a, "out", pcapA)
	stopB := tcpdump(t, net.b, "in", pcapB)
	first, last, sent := traffic(t, net.a, T, 3)
	waitInterval(t, resultsPath, last, b)
	stopA()
	stopB()
	checkAgainstTruth(t, pcapA, pcapB, resultsPath, rcfg, first, last, sent)
	t.Logf("delays checked against tcpdump after %s", time.Since(began).Round(time.Second))

	// The grandmaster stops: both ends unsynced, every interval flagged.
	gm.Kill()
	waitFor(t, 30*time.Second, "lds_ptp_state unsynced at both ends", func() (bool, string) {
		ms, mr := a.metrics(9466), b.metrics(9465)
		return strings.Contains(ms, `lds_ptp_state{state="unsynced"} 1`) &&
			strings.Contains(mr, `lds_ptp_state{end="receiver",sender="",state="unsynced"} 1`), grep(ms, "lds_ptp_") + grep(mr, "lds_ptp_")
	})
	ufirst, ulast, _ := traffic(t, net.a, T, 2)
	waitInterval(t, resultsPath, ulast, b)
	checkUnsynced(t, resultsPath, ufirst, ulast)
	if m := b.metrics(9465); !regexp.MustCompile(`lds_intervals_total\{outcome="clock_unsynced",sender="` + senderID + `"\} [1-9]`).MatchString(m) {
		t.Errorf("lds_intervals_total counts no clock_unsynced interval:\n%s", grep(m, "lds_intervals_total"))
	}

	// The sandbox really applies inside the booted hosts.
	assertSandboxed(t, a, "lds-sender")
	assertSandboxed(t, b, "lds-receiver")

	// Nothing was refused, nothing restarted.
	for _, h := range []*host{a, b} {
		if j, _ := h.run("journalctl", "--no-pager", "-o", "short-precise"); strings.Contains(strings.ToLower(j), "permission denied") {
			t.Errorf("%s: the journal says permission denied:\n%s", h.name, grep(strings.ToLower(j), "permission denied"))
		}
	}
	if n := a.prop("lds-sender", "NRestarts"); n != "0" {
		t.Errorf("lds-sender restarted %s times:\n%s", n, a.journal("lds-sender"))
	}
	if n := b.prop("lds-receiver", "NRestarts"); n != recvRestarts {
		t.Errorf("lds-receiver restarted while measuring (NRestarts %s, was %s):\n%s", n, recvRestarts, b.journal("lds-receiver"))
	}
	removeDeb(t, b)
	t.Logf("deployment test: %s in all", time.Since(began).Round(time.Second))
}

// assertSandboxed reads the running daemon's /proc status inside the host:
// user lds, CAP_NET_RAW only, no new privileges, a seccomp filter.
func assertSandboxed(t *testing.T, h *host, unit string) {
	t.Helper()
	pid := h.prop(unit, "MainPID")
	status := h.must("cat", "/proc/"+pid+"/status")
	want := map[string]string{"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000002000", "CapBnd": "0000000000002000",
		"CapPrm": "0000000000002000", "Umask": "0077"}
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if w, check := want[k]; ok && check {
			if strings.TrimSpace(v) != w {
				t.Errorf("%s: %s %s: %s, want %s", h.name, unit, k, strings.TrimSpace(v), w)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("%s: %s: /proc/%s/status lacks %v", h.name, unit, pid, want)
	}
	t.Logf("%s: %s %s", h.name, unit, strings.ReplaceAll(strings.TrimSpace(grep(status, "VmHWM")+grep(status, "VmRSS")), "\n", ", "))
	uid := strings.TrimSpace(h.must("id", "-u", "lds"))
	if !regexp.MustCompile(`(?m)^Uid:\s+` + uid + `\s+` + uid + `\s+` + uid + `\s+` + uid + `$`).MatchString(status) {
		t.Errorf("%s: %s does not run as lds (uid %s):\n%s", h.name, unit, uid, grep(status, "Uid"))
	}
}

func needDeploy(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	if testing.Short() {
		t.Skip("SKIPPED in -short mode: the two-host deployment boots two Debian containers (about 2 minutes; `go test -run TestTwoHostDeployment ./deploy/systemd/`)")
	}
	for _, tool := range []string{"debootstrap", "systemd-nspawn", "nsenter", "ip", "ethtool", "tcpdump", "openssl", "curl", "make", "ptp4l", "setpriv", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not found (apt-get install -y debootstrap systemd-container util-linux iproute2 ethtool tcpdump openssl curl make linuxptp)", tool)
		}
	}
}

// deployNet is the namespaces: one per host and the grandmaster's, which
// holds the management bridge.
type deployNet struct{ gm, a, b string }

func newDeployNet(t *testing.T) *deployNet {
	t.Helper()
	p := fmt.Sprintf("ldsdeploy-%d-%d", os.Getpid(), time.Now().UnixNano()%100000)
	n := &deployNet{gm: p + "-gm", a: p + "-a", b: p + "-b"}
	for _, ns := range []string{n.gm, n.a, n.b} {
		ptp4l.Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		// IPv6 off: no router solicitations or MLD reports on the taps.
		ptp4l.Run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	steps := [][]string{
		{"-n", n.gm, "link", "add", "br0", "type", "bridge"},
		{"-n", n.gm, "link", "add", "gm0", "type", "veth", "peer", "name", "gmb"},
		{"-n", n.gm, "link", "add", "ea", "type", "veth", "peer", "name", "eth0", "netns", n.a},
		{"-n", n.gm, "link", "add", "eb", "type", "veth", "peer", "name", "eth0", "netns", n.b},
		{"-n", n.a, "link", "add", "tap0", "type", "veth", "peer", "name", "tap0", "netns", n.b},
		{"-n", n.gm, "link", "set", "gmb", "master", "br0"},
		{"-n", n.gm, "link", "set", "ea", "master", "br0"},
		{"-n", n.gm, "link", "set", "eb", "master", "br0"},
		{"-n", n.a, "addr", "add", addrA + "/24", "dev", "eth0"},
		{"-n", n.b, "addr", "add", addrB + "/24", "dev", "eth0"},
	}
	for _, s := range steps {
		ptp4l.Run(t, "ip", s...)
	}
	for ns, ifs := range map[string][]string{n.gm: {"lo", "br0", "gm0", "gmb", "ea", "eb"}, n.a: {"lo", "eth0", "tap0"}, n.b: {"lo", "eth0", "tap0"}} {
		for _, i := range ifs {
			ptp4l.Run(t, "ip", "-n", ns, "link", "set", i, "up")
		}
	}
	// README "Taps": receive coalescing off on each capture interface.
	for _, ns := range []string{n.a, n.b} {
		ptp4l.Run(t, "ip", "netns", "exec", ns, "ethtool", "-K", "tap0", "gro", "off", "lro", "off")
	}
	return n
}

// startGrandmaster runs the PTP grandmaster on the bridge, outside the
// hosts (a host that is itself grandmaster counts as unsynced).
func (n *deployNet) startGrandmaster(t *testing.T, work string) *ptp4l.Proc {
	t.Helper()
	conf := []string{"[global]", "free_running 1", "priority1 10", "uds_address " + filepath.Join(work, "gm.sock")}
	for _, kv := range ptpRates {
		conf = append(conf, kv[0]+" "+kv[1])
	}
	cfg := filepath.Join(work, "gm.cfg")
	if err := os.WriteFile(cfg, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ptp4l.Start(t, n.gm, "gm0", cfg, filepath.Join(work, "gm.log"))
}

// ptpRates are the message rates of every ptp4l in the test: Syncs at
// 16/s so that the slaves measure within a second; Announces at 2/s with a
// receipt timeout of 6 (3 s), so that a loaded machine's scheduling stalls
// do not make a slave drop its master (a 375 ms timeout did, under the
// traffic generator), while a stopped grandmaster is noticed within 3 s.
var ptpRates = [][2]string{
	{"logAnnounceInterval", "-1"}, {"announceReceiptTimeout", "6"},
	{"logSyncInterval", "-4"}, {"logMinDelayReqInterval", "-4"},
}

// pkiFiles are the README's certificate commands, run in dir.
type pkiFiles struct{ dir string }

func makePKI(t *testing.T, work string) pkiFiles {
	t.Helper()
	dir := filepath.Join(work, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The README's commands, verbatim (bash for the <(...)).
	script := `
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 -subj /CN=lds-ca -keyout ca.key -out ca.crt
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=receiver -keyout receiver.key -out receiver.csr
openssl x509 -req -in receiver.csr -CA ca.crt -CAkey ca.key -days 825 -out receiver.crt -extfile <(echo subjectAltName=DNS:receiver.example.net)
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=edge-a -keyout sender.key -out sender.csr
openssl x509 -req -in sender.csr -CA ca.crt -CAkey ca.key -days 825 -out sender.crt
`
	cmd := exec.Command("bash", "-euc", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's openssl commands: %v\n%s", err, out)
	}
	return pkiFiles{dir}
}

// installPKI copies the certificate files to the host and installs them
// with the README's commands (role: sender or receiver).
func installPKI(t *testing.T, h *host, p pkiFiles, role string) {
	t.Helper()
	for _, f := range []string{"ca.crt", role + ".crt", role + ".key"} {
		b, err := os.ReadFile(filepath.Join(p.dir, f))
		if err != nil {
			t.Fatal(err)
		}
		h.write("/root/pki/"+f, string(b), 0o600)
	}
	h.sh(fmt.Sprintf(`cd /root/pki
install -d -m 0750 -g lds /etc/lds/tls
install -m 0644 ca.crt %[1]s.crt /etc/lds/tls/
install -m 0640 -g lds %[1]s.key /etc/lds/tls/`, role))
}

// configure edits the installed configs as the README says and checks them
// with --check-config.
func configure(t *testing.T, a, b *host, seed string) {
	t.Helper()
	editYAML(t, a.path("/etc/lds/sender.yaml"), map[string]any{
		"sketch.seed": seed, "capture.source.interface": "tap0",
		"sender.id": senderID, "sender.receiver": receiverName + ":7420",
	})
	editYAML(t, b.path("/etc/lds/receiver.yaml"), map[string]any{
		"sketch.seed": seed, "capture.source.interface": "tap0",
		"receiver.senders":      []map[string]string{{"id": senderID}},
		"receiver.results_file": "/var/lib/lds/results.jsonl",
	})
	for _, h := range []*host{a, b} {
		h.sh("chgrp lds /etc/lds/*.yaml && chmod 0640 /etc/lds/*.yaml") // they hold the seed
	}
	t.Logf("lds-a: lds-sender --check-config:\n%s", a.must("lds-sender", "--config", "/etc/lds/sender.yaml", "--check-config"))
	t.Logf("lds-b: lds-receiver --check-config:\n%s", b.must("lds-receiver", "--config", "/etc/lds/receiver.yaml", "--check-config"))
	// The preflight on a broken host: a key user lds cannot read, and a
	// capture interface that is not there. It must fail, naming each.
	a.must("chmod", "0600", "/etc/lds/tls/sender.key")
	out, err := a.run("lds-sender", "--config", "/etc/lds/sender.yaml", "--check-config", "--interface", "eth9")
	a.must("chmod", "0640", "/etc/lds/tls/sender.key")
	for _, want := range []string{"FAIL sender.tls.key = /etc/lds/tls/sender.key: not readable by user lds", "chmod 0640 /etc/lds/tls/sender.key",
		"FAIL capture.source.interface = eth9: no such interface", "lds-sender would not run as configured: 2 failed"} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("--check-config on a broken host: err %v, output lacks %q:\n%s", err, want, out)
		}
	}
}

// builtDeb is the one package `make deb` left in dist/.
func builtDeb(t *testing.T, repo string) string {
	t.Helper()
	debs, _ := filepath.Glob(filepath.Join(repo, "dist", "lds_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb left %d packages in dist/ (%v), want 1", len(debs), debs)
	}
	return debs[0]
}

// installDeb copies the package into the host and installs it with dpkg
// -i, as README "Install" says. The maintainer scripts must create the
// system user lds and its directories, and enable and start nothing;
// every unit's Documentation= must name a file the package installed, and
// the binaries must print the version the package was built from.
func installDeb(t *testing.T, h *host, deb, describe string) {
	t.Helper()
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	h.write("/root/lds.deb", string(b), 0o644)
	h.must("dpkg", "-i", "/root/lds.deb")
	if out := h.must("getent", "passwd", "lds"); !strings.Contains(out, ":/nonexistent:/usr/sbin/nologin") {
		t.Errorf("%s: the package's user lds: %q, want a system user without a home or shell", h.name, out)
	}
	for _, want := range [][2]string{{"/etc/lds/tls", "root:lds 750"}, {"/var/lib/lds", "lds:lds 750"},
		{"/etc/lds/sender.yaml", "root:lds 640"}, {"/etc/lds/receiver.yaml", "root:lds 640"}} {
		if got := strings.TrimSpace(h.must("stat", "-c", "%U:%G %a", want[0])); got != want[1] {
			t.Errorf("%s: after dpkg -i, %s is %s, want %s", h.name, want[0], got, want[1])
		}
	}
	for _, unit := range []string{"lds-sender", "lds-receiver"} {
		if st, _ := h.run("systemctl", "is-enabled", unit); strings.TrimSpace(st) != "disabled" {
			t.Errorf("%s: after dpkg -i, %s is %q, want disabled (nothing starts before it is configured)", h.name, unit, strings.TrimSpace(st))
		}
		if st := h.prop(unit, "ActiveState"); st != "inactive" {
			t.Errorf("%s: after dpkg -i, %s is %s, want inactive", h.name, unit, st)
		}
		doc := h.prop(unit, "Documentation")
		path, ok := strings.CutPrefix(doc, "file://")
		if !ok {
			t.Errorf("%s: %s Documentation=%q is not a file:// URL", h.name, unit, doc)
		} else if _, err := os.Stat(h.path(path)); err != nil {
			t.Errorf("%s: %s Documentation=%s: %v", h.name, unit, doc, err)
		}
	}
	for _, bin := range []string{"lds-sender", "lds-receiver", "ldsctl"} {
		if out, want := strings.TrimSpace(h.must(bin, "--version")), bin+" "+describe; out != want {
			t.Errorf("%s: %s --version says %q, want %q (git describe of the tree the package was built from)", h.name, bin, out, want)
		}
	}
}

// removeDeb removes, then purges, the package on a host whose daemon runs:
// removal stops it, purging removes the units' files and the
// configurations, and keeps user lds and the results in /var/lib/lds.
func removeDeb(t *testing.T, h *host) {
	t.Helper()
	h.must("dpkg", "-r", "lds")
	for _, unit := range []string{"lds-sender", "lds-receiver"} {
		if st := h.prop(unit, "ActiveState"); st == "active" || st == "activating" {
			t.Errorf("%s: after dpkg -r, %s is %s, want stopped", h.name, unit, st)
		}
	}
	h.must("dpkg", "--purge", "lds")
	for _, gone := range []string{"/usr/bin/lds-receiver", "/lib/systemd/system/lds-receiver.service", "/etc/lds/receiver.yaml"} {
		if _, err := os.Stat(h.path(gone)); err == nil {
			t.Errorf("%s: %s is still there after dpkg --purge", h.name, gone)
		}
	}
	h.must("getent", "passwd", "lds")
	if _, err := os.Stat(h.path("/var/lib/lds/results.jsonl")); err != nil {
		t.Errorf("%s: dpkg --purge removed the results: %v", h.name, err)
	}
}

// reinstall installs the package again over a configured host (an
// upgrade): the edited configuration (a conffile) must survive it.
func reinstall(t *testing.T, h *host, deb, file, seed string) {
	t.Helper()
	h.must("dpkg", "-i", "/root/lds.deb")
	b, err := os.ReadFile(h.path(file))
	if err != nil || !strings.Contains(string(b), seed) {
		t.Fatalf("dpkg -i %s over a configured host replaced %s (err %v)", filepath.Base(deb), file, err)
	}
	h.must("systemctl", "daemon-reload")
}

// tapDownAtBoot starts lds-receiver with its tap down, checks that it
// exports its own clock state and the link state meanwhile and that the
// unit does not restart, then brings the tap up and waits for capture. It
// returns NRestarts then.
func tapDownAtBoot(t *testing.T, b *host) string {
	t.Helper()
	ptp4l.Run(t, "ip", "-n", b.netns, "link", "set", "tap0", "down")
	b.must("systemctl", "enable", "--now", "lds-receiver")
	// While the tap is down the receiver publishes nothing, and says why:
	// its own clock state and the link state are there from start.
	waitFor(t, 30*time.Second, "lds-receiver exporting its own lds_ptp_state and lds_capture_link_up 0 with the tap down", func() (bool, string) {
		m := b.metrics(9465)
		return regexp.MustCompile(`lds_ptp_state\{end="receiver",sender="",state="(synced|unsynced|unknown)"\} 1`).MatchString(m) &&
			strings.Contains(m, "\nlds_capture_link_up 0\n"), grep(m, "lds_ptp") + grep(m, "lds_capture_link") + b.journal("lds-receiver")
	})
	// Longer than RestartSec=2s: a unit that failed would have restarted.
	time.Sleep(4 * time.Second)
	n, active := b.prop("lds-receiver", "NRestarts"), b.prop("lds-receiver", "ActiveState")
	if n != "0" || active != "active" {
		t.Errorf("tap down at boot: lds-receiver NRestarts=%s ActiveState=%s, want 0 and active (the daemon waits for its tap):\n%s",
			n, active, tail(b.journal("lds-receiver"), 3000))
	}
	ptp4l.Run(t, "ip", "-n", b.netns, "link", "set", "tap0", "up")
	waitFor(t, 30*time.Second, "lds-receiver capturing with the tap up", func() (bool, string) {
		m := b.metrics(9465)
		return b.prop("lds-receiver", "SubState") == "running" && strings.Contains(m, "\nlds_capture_link_up 1\n"),
			grep(m, "lds_capture_link") + b.journal("lds-receiver")
	})
	return b.prop("lds-receiver", "NRestarts")
}

// tcpdump captures the tap of a host's namespace in one direction; the
// returned func stops it and waits for the file to be complete.
func tcpdump(t *testing.T, netns, dir, file string) func() {
	t.Helper()
	logPath := file + ".log"
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command("ip", "netns", "exec", netns, "tcpdump", "-n", "-i", "tap0", "-Q", dir, "-s", "256", "-B", "8192", "--immediate-mode", "-U",
		"--time-stamp-precision=nano", "-Z", "root", "-w", file, "ip and src host "+e2e.SrcAddr.String())
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		select {
		case <-done:
			return
		default:
		}
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	waitFor(t, 10*time.Second, "tcpdump listening in "+netns, func() (bool, string) {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "listening on"), string(b)
	})
	return stop
}

// traffic sends n measured intervals of traffic (after one warm-up
// interval) out of host A's tap and returns the measured intervals and the
// packets sent.
func traffic(t *testing.T, netns string, T time.Duration, n int) (first, last int64, sent uint64) {
	t.Helper()
	tc := e2e.DefaultTraffic()
	tc.Flows, tc.PPS, tc.Duration = 40, 500, time.Duration(n+1)*T
	begin := time.Now().Add(300 * time.Millisecond).Truncate(T).Add(T)
	first = begin.UnixNano()/int64(T) + 1
	last = first + int64(n) - 1
	ctx, cancel := context.WithTimeout(context.Background(), tc.Duration+time.Minute)
	defer cancel()
	st, err := e2e.Generate(ctx, "/run/netns/"+netns, "tap0", begin, tc)
	if err != nil || st.SendErrors != 0 {
		t.Fatalf("traffic: %v, %+v", err, st)
	}
	return first, last, st.Sent
}

// waitInterval waits until the results file holds interval last and has
// stopped growing (an interval's records are written together).
func waitInterval(t *testing.T, path string, last int64, b *host) {
	t.Helper()
	var size int64 = -1
	waitFor(t, 60*time.Second, fmt.Sprintf("interval %d in %s", last, path), func() (bool, string) {
		recs, _ := eval.ReadResultsFile(path)
		fi, err := os.Stat(path)
		if err != nil {
			return false, b.journal("lds-receiver")
		}
		have := slices.ContainsFunc(recs, func(r results.FlowRecord) bool { return r.Interval >= last })
		grown := fi.Size() != size
		size = fi.Size()
		return have && !grown, b.journal("lds-receiver")
	})
}

// loadReceiverConfig reads the installed receiver.yaml (without the
// checks of files that exist only inside the host).
func loadReceiverConfig(t *testing.T, b *host) config.Receiver {
	t.Helper()
	c := config.DefaultReceiver()
	f, err := os.Open(b.path("/etc/lds/receiver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := config.Decode(f, &c, "receiver.yaml"); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkAgainstTruth compares the published records of the measured
// intervals with the per-packet join of the two tcpdump captures.
func checkAgainstTruth(t *testing.T, pcapA, pcapB, resultsPath string, rcfg config.Receiver, first, last int64, sent uint64) {
	t.Helper()
	j, err := join.Files(pcapA, pcapB, rcfg.CaptureConfig(), int64(rcfg.Interval))
	if err != nil {
		t.Fatalf("join of the tcpdump captures: %v", err)
	}
	if j.Packets != sent {
		t.Fatalf("tcpdump at tap A saw %d packets, the generator sent %d: the truth is incomplete", j.Packets, sent)
	}
	recs, err := eval.ReadResultsFile(resultsPath)
	if err != nil {
		t.Fatal(err)
	}
	got := map[join.FlowID]results.FlowRecord{}
	for _, r := range recs {
		got[join.FlowID{Interval: r.Interval, Key: r.Key}] = r
	}
	var flows, withDelay, missing int
	var relErrs []float64
	for _, f := range j.Sorted() {
		if f.Interval < first || f.Interval > last {
			continue
		}
		flows++
		if f.Lost() != 0 {
			t.Errorf("truth: flow %s in %d lost %d packets on a veth", f.Key, f.Interval, f.Lost())
		}
		r, ok := got[join.FlowID{Interval: f.Interval, Key: f.Key}]
		if !ok {
			missing++
			continue
		}
		if r.Unsynced || r.Status == results.StatusClockUnsynced {
			t.Errorf("flow %s in %d flagged clock_unsynced while both ends were synced", f.Key, f.Interval)
		}
		if r.Loss == nil || *r.Loss != 0 {
			t.Errorf("flow %s in %d: loss %v reported (status %q), the truth has none", f.Key, f.Interval, fmtLoss(r.Loss), r.Status)
		}
		if r.DelayNS == nil || f.Sent < 10 {
			continue
		}
		withDelay++
		relErrs = append(relErrs, math.Abs(*r.DelayNS-f.MeanNS)/f.MeanNS)
	}
	big := 0
	for _, f := range j.Flows {
		if f.Interval >= first && f.Interval <= last && f.Sent >= 10 {
			big++
		}
	}
	if flows == 0 || missing > 0 {
		t.Fatalf("%d of %d truth flows of intervals %d..%d have no published record", missing, flows, first, last)
	}
	if withDelay == 0 || float64(withDelay) < 0.9*float64(big) {
		t.Fatalf("delays published for %d of %d flows with >= 10 packets, want >= 90%%", withDelay, big)
	}
	slices.Sort(relErrs)
	med := relErrs[len(relErrs)/2]
	t.Logf("%d flows in %d intervals; delay for %d of %d flows with >= 10 packets; relative delay error vs tcpdump: median %.4f, max %.4f",
		flows, last-first+1, withDelay, big, med, relErrs[len(relErrs)-1])
	if med > 0.05 {
		t.Errorf("median relative delay error %.4f against the tcpdump join, want <= 0.05", med)
	}
}

// checkUnsynced: every record of the intervals after the grandmaster
// stopped is flagged and has no delay.
func checkUnsynced(t *testing.T, resultsPath string, first, last int64) {
	t.Helper()
	recs, err := eval.ReadResultsFile(resultsPath)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Interval < first || r.Interval > last {
			continue
		}
		n++
		if !r.Unsynced || r.DelayNS != nil {
			t.Errorf("interval %d flow %s: clock_unsynced %v, delay %v after the grandmaster stopped", r.Interval, r.Key, r.Unsynced, r.DelayNS)
		}
	}
	if n == 0 {
		t.Fatalf("no records for intervals %d..%d after the grandmaster stopped", first, last)
	}
	t.Logf("%d records of intervals %d..%d, all flagged clock_unsynced", n, first, last)
}

// waitFor polls cond until it holds or timeout passes; the string cond
// returns is shown on failure.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s:\n%s", timeout, what, tail(detail, 4000))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func mustOut(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return string(out)
}

// grep returns the lines of s that contain substr.
func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// fmtLoss prints a record's loss, "null" where withheld.
func fmtLoss(v *float64) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprint(*v)
}
