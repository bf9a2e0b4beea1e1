// Package systemd holds the unit files, the ptp4l@.service drop-in and the
// two-host deployment test (deploy_test.go). units_test.go checks the files
// with systemd-analyze against freshly built binaries.
package systemd

import (
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/test/testutil"
)

// hardening is what both daemon units must set (docs/operations.md).
var hardening = []string{
	"User=lds", "Restart=on-failure",
	"AmbientCapabilities=CAP_NET_RAW\n", "CapabilityBoundingSet=CAP_NET_RAW\n", "NoNewPrivileges=yes",
	"ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
	"ProtectClock=yes", "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectKernelLogs=yes",
	"ProtectControlGroups=yes", "ProtectProc=invisible", "RestrictNamespaces=yes", "RestrictSUIDSGID=yes",
	"LockPersonality=yes", "MemoryDenyWriteExecute=yes", "RestrictRealtime=yes", "SystemCallArchitectures=native",
	"SystemCallFilter=@system-service\n", "UMask=0077", "MemoryMax=",
	"RestrictAddressFamilies=AF_PACKET AF_NETLINK AF_UNIX AF_INET AF_INET6\n",
}

func TestUnitsVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testutil.SkipOrFail(t, "%s", "systemd-analyze not installed (Debian package systemd)")
	}
	dir := t.TempDir()
	for _, name := range []string{"lds-sender", "lds-receiver"} {
		out, err := exec.Command("go", "build", "-o", dir, "../../cmd/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
		unit, err := os.ReadFile(name + ".service")
		if err != nil {
			t.Fatal(err)
		}
		text := string(unit)
		for _, must := range append(hardening, "RuntimeDirectory="+name+"\n") {
			if !strings.Contains(text, must) {
				t.Errorf("%s.service lacks %q", name, must)
			}
		}
		// The PTP reply socket lives in RuntimeDirectory=; nothing needs to
		// write elsewhere under /run.
		if strings.Contains(text, "ReadWritePaths=/var/run") || strings.Contains(text, "ReadWritePaths=/run") {
			t.Errorf("%s.service makes /run writable: the reply socket belongs in RuntimeDirectory=", name)
		}
		text = strings.ReplaceAll(text, "/usr/local/bin/"+name, filepath.Join(dir, name))
		p := filepath.Join(dir, name+".service")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err = exec.Command(sa, "verify", p).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s.service: %v\n%s", name, err, out)
		}
		// The PHC drop-in on top of the unit.
		dropDir := filepath.Join(dir, name+".service.d")
		if err := os.MkdirAll(dropDir, 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, "lds-phc.conf", filepath.Join(dropDir, "phc.conf"))
		verifyWithPath(t, sa, dir, p)
	}
}

// TestPtp4lDropIn verifies the ptp4l@.service drop-in on top of Debian's
// ptp4l@.service, with the helper script it runs.
func TestPtp4lDropIn(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testutil.SkipOrFail(t, "%s", "systemd-analyze not installed (Debian package systemd)")
	}
	const debian = "/lib/systemd/system/ptp4l@.service"
	if _, err := os.Stat(debian); err != nil {
		testutil.SkipOrFail(t, "%s not found (Debian package linuxptp)", debian)
	}
	if out, err := exec.Command("sh", "-n", "lds-ptp4l-socket").CombinedOutput(); err != nil {
		t.Fatalf("sh -n lds-ptp4l-socket: %v\n%s", err, out)
	}
	script, err := filepath.Abs("lds-ptp4l-socket")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyFile(t, debian, filepath.Join(dir, "ptp4l@.service"))
	drop, err := os.ReadFile("ptp4l@.service.d/lds.conf")
	if err != nil {
		t.Fatal(err)
	}
	const installed = "/usr/local/lib/lds/lds-ptp4l-socket"
	if !strings.Contains(string(drop), "ExecStartPost=-"+installed+" ") {
		t.Fatalf("the drop-in does not run %s (what make install installs)", installed)
	}
	if err := os.MkdirAll(filepath.Join(dir, "ptp4l@.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(drop), installed, script)
	if err := os.WriteFile(filepath.Join(dir, "ptp4l@.service.d", "lds.conf"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	verifyWithPath(t, sa, dir, filepath.Join(dir, "ptp4l@.service"))
}

// verifyWithPath runs systemd-analyze verify with dir as the unit path, so
// that drop-ins under dir are read too; any output is a finding.
func verifyWithPath(t *testing.T, sa, dir, unit string) {
	t.Helper()
	cmd := exec.Command(sa, "verify", unit)
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s with drop-ins from %s: %v\n%s", filepath.Base(unit), dir, err, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPtp4lSocketScript runs the drop-in's helper against a real unix
// datagram socket that appears only after the helper started (as ptp4l's
// does after ExecStartPost= began): the socket ends up group-owned and
// group read-write.
func TestPtp4lSocketScript(t *testing.T) {
	testutil.RequireRoot(t) // chgrp to another group
	grp, err := user.LookupGroup("daemon")
	if err != nil {
		testutil.SkipOrFail(t, "no group daemon to hand the socket to: %v", err)
	}
	dir, err := os.MkdirTemp("", "ldssock") // short: a sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ptp4l")
	cmd := exec.Command("sh", "lds-ptp4l-socket", sock, "daemon")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the helper is waiting by now, or will find the socket at once: both are fine
	old := syscall.Umask(0o117)        // ptp4l's socket: srw-rw---- root root
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("lds-ptp4l-socket: %v\n%s", err, out.String())
	}
	var st syscall.Stat_t
	if err := syscall.Stat(sock, &st); err != nil {
		t.Fatal(err)
	}
	if gid := strconv.Itoa(int(st.Gid)); gid != grp.Gid || st.Mode&0o060 != 0o060 {
		t.Fatalf("socket gid %s mode %o, want gid %s (daemon) and g+rw", gid, st.Mode&0o777, grp.Gid)
	}
}

// TestUnitsMemoryMax holds each unit's MemoryMax= to the worst case of the
// default configuration at 1 Mpps (config.MemoryBound, `ldsctl memory`),
// and GOMEMLIMIT below it.
func TestUnitsMemoryMax(t *testing.T) {
	in := config.MemoryInput{PPS: 1e6}
	rc, sc := config.DefaultReceiver(), config.DefaultSender()
	for _, tc := range []struct {
		name string
		peak int64
	}{
		{"lds-receiver", rc.MemoryBound(in).Peak},
		{"lds-sender", sc.MemoryBound(in).Peak},
	} {
		unit, err := os.ReadFile(tc.name + ".service")
		if err != nil {
			t.Fatal(err)
		}
		memMax := unitBytes(t, string(unit), `(?m)^MemoryMax=(\d+)([KMG]?)$`)
		limit := unitBytes(t, string(unit), `(?m)^Environment=GOMEMLIMIT=(\d+)([KMG]?)iB$`)
		if tc.peak > memMax {
			t.Errorf("%s: MemoryMax= %d MiB is below the default configuration's bound %d MiB", tc.name, memMax>>20, tc.peak>>20)
		}
		if limit >= memMax || limit < memMax*8/10 {
			t.Errorf("%s: GOMEMLIMIT %d MiB, want ~90 %% of MemoryMax= %d MiB", tc.name, limit>>20, memMax>>20)
		}
	}
}

// unitBytes reads a size (K, M, G: powers of 1024) matched by re.
func unitBytes(t *testing.T, unit, re string) int64 {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(unit)
	if m == nil {
		t.Fatalf("no %s in the unit", re)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n << map[string]int{"": 0, "K": 10, "M": 20, "G": 30}[m[2]]
}
