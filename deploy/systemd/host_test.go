package systemd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lds-net/lds/test/testutil"
)

// The Debian 12 image both hosts boot: debootstrap's minbase plus what a
// systemd host with Debian's linuxptp needs (and `ip`, which minbase lacks).
const (
	debianSuite    = "bookworm"
	debianPackages = "systemd,systemd-sysv,dbus,iproute2,linuxptp"
	debianMirror   = "http://deb.debian.org/debian"
)

// rootfsCache returns a debootstrapped Debian 12 root, built once and kept
// under $LDS_DEPLOY_CACHE (default /var/cache/lds/deploy-test) in a
// directory named by the suite, package list and mirror, so that reruns
// skip the ~40 s debootstrap. The hosts boot copies of it.
func rootfsCache(t *testing.T) string {
	t.Helper()
	mirror := debianMirror
	if m := os.Getenv("LDS_DEBIAN_MIRROR"); m != "" {
		mirror = m
	}
	base := os.Getenv("LDS_DEPLOY_CACHE")
	if base == "" {
		base = "/var/cache/lds/deploy-test"
	}
	sum := sha256.Sum256([]byte(debianSuite + "\x00" + debianPackages + "\x00" + mirror))
	dir := filepath.Join(base, debianSuite+"-"+hex.EncodeToString(sum[:6]))
	root := filepath.Join(dir, "rootfs")
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		t.Logf("Debian rootfs from the cache: %s", root)
		return root
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(base, "building-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+debianPackages,
		debianSuite, filepath.Join(tmp, "rootfs"), mirror).CombinedOutput()
	if err != nil {
		testutil.SkipOrFail(t, "debootstrap %s from %s failed (network? set LDS_DEBIAN_MIRROR): %v\n%s", debianSuite, mirror, err, tail(string(out), 2000))
	}
	t.Logf("debootstrap --variant=minbase --include=%s %s: %s", debianPackages, debianSuite, time.Since(start).Round(time.Second))
	if err := os.WriteFile(filepath.Join(tmp, "complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// dir only ever appears whole (a rename): if a concurrent run put it
	// there first, use that one.
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "complete")); serr != nil {
			t.Fatalf("caching the rootfs: %v", err)
		}
	}
	return root
}

// host is one systemd-booted Debian container in its own network
// namespace.
type host struct {
	t      *testing.T
	name   string // hostname
	root   string // its root file system (a copy of the cached rootfs)
	netns  string // network namespace it runs in (made by ip netns)
	cmd    *exec.Cmd
	pid    int // the container's init, in this (the host's) pid namespace
	log    string
	exited chan struct{}
}

// newHost copies the cached rootfs for a host called name.
func newHost(t *testing.T, cache, work, name, netns string) *host {
	t.Helper()
	h := &host{t: t, name: name, root: filepath.Join(work, name), netns: netns, log: filepath.Join(work, name+".console")}
	if out, err := exec.Command("cp", "-a", "--reflink=auto", cache, h.root).CombinedOutput(); err != nil {
		t.Fatalf("copying the rootfs for %s: %v\n%s", name, err, out)
	}
	h.write("/etc/hostname", name+"\n", 0o644)
	return h
}

// path is a file of the host, seen from outside.
func (h *host) path(p string) string { return filepath.Join(h.root, p) }

func (h *host) write(p, content string, mode os.FileMode) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(h.path(p)), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(h.path(p), []byte(content), mode); err != nil {
		h.t.Fatal(err)
	}
}

// start launches systemd-nspawn (systemd as the container's init); waitUp
// waits until the boot has finished. Both hosts boot in parallel this way.
// On this machine's cgroup layout nspawn needs the unified hierarchy, and
// with no systemd on the host, --register=no --keep-unit.
func (h *host) start(machine string) {
	t := h.t
	t.Helper()
	lf, err := os.Create(h.log)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	h.cmd = exec.Command("systemd-nspawn", "--register=no", "--keep-unit", "--quiet", "--console=passive",
		"--machine="+machine, "-D", h.root, "--network-namespace-path=/run/netns/"+h.netns, "--boot")
	h.cmd.Env = append(os.Environ(), "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1")
	h.cmd.Stdout, h.cmd.Stderr = lf, lf
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn for %s: %v", h.name, err)
	}
	h.exited = make(chan struct{})
	go func() { h.cmd.Wait(); close(h.exited) }()
	t.Cleanup(h.shutdown)
}

func (h *host) waitUp() {
	t := h.t
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for h.pid == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no container init within 60 s; console:\n%s", h.name, tailFile(h.log, 3000))
		}
		select {
		case <-h.exited:
			t.Fatalf("%s: systemd-nspawn exited: %v; console:\n%s", h.name, h.cmd.ProcessState, tailFile(h.log, 3000))
		case <-time.After(100 * time.Millisecond):
		}
		h.pid = initOf(h.cmd.Process.Pid)
	}
	// systemctl answers once systemd's bus is up; --wait then waits for
	// the boot to finish.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out string
	var err error
	for {
		out, err = h.runCtx(ctx, "systemctl", "is-system-running", "--wait")
		// "offline" and "Failed to connect to bus": systemd has not yet
		// opened its private socket.
		if ctx.Err() != nil || !strings.Contains(out, "Failed to connect to bus") && strings.TrimSpace(out) != "offline" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	state := strings.TrimSpace(out)
	if state != "running" {
		failed, _ := h.run("systemctl", "--failed", "--no-legend")
		if state != "degraded" || err != nil && ctx.Err() != nil {
			t.Fatalf("%s did not come up: %q (%v); failed units:\n%s\nconsole:\n%s", h.name, state, err, failed, tailFile(h.log, 3000))
		}
		t.Logf("%s is up but degraded; failed units:\n%s", h.name, failed)
	}
}

// initOf finds the container's systemd among the children of nspawn.
func initOf(nspawn int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", nspawn))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(s)
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if strings.TrimSpace(string(comm)) == "systemd" {
				return pid
			}
		}
	}
	return 0
}

// shutdown powers the container off (units get their SIGTERM), or kills
// nspawn if that takes too long.
func (h *host) shutdown() {
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	select {
	case <-h.exited:
		return
	default:
	}
	h.poweroff()
	select {
	case <-h.exited:
	case <-time.After(30 * time.Second):
		h.t.Logf("%s: no poweroff within 30 s, killing systemd-nspawn", h.name)
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.exited
	}
}

// poweroff asks the container to power off (nspawn turns SIGTERM into
// the container's poweroff) without waiting.
func (h *host) poweroff() {
	if h.cmd != nil && h.cmd.Process != nil {
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// run runs a command inside the container (all its namespaces).
func (h *host) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return h.runCtx(ctx, args...)
}

func (h *host) runCtx(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(h.pid), "-a", "--"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// must runs a command inside the container and fails the test on error.
func (h *host) must(args ...string) string {
	h.t.Helper()
	out, err := h.run(args...)
	if err != nil {
		h.t.Fatalf("%s: %s: %v\n%s", h.name, strings.Join(args, " "), err, out)
	}
	return out
}

// sh runs a shell script inside the container, as an operator would type it.
func (h *host) sh(script string) string {
	h.t.Helper()
	return h.must("sh", "-euc", script)
}

// prop is a unit's property (systemctl show --value).
func (h *host) prop(unit, name string) string {
	out, _ := h.run("systemctl", "show", "--value", "-p", name, unit)
	return strings.TrimSpace(out)
}

func (h *host) journal(unit string) string {
	out, _ := h.run("journalctl", "--no-pager", "-o", "short-precise", "-u", unit)
	return out
}

// metrics scrapes a daemon's /metrics from inside the host's network
// namespace.
func (h *host) metrics(port int) string {
	out, err := exec.Command("ip", "netns", "exec", h.netns, "curl", "-sf", "--max-time", "5",
		fmt.Sprintf("http://127.0.0.1:%d/metrics", port)).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// assertNoSysTime checks the container's bounding set: no process in it,
// ptp4l included, can step or slew this machine's clock.
func (h *host) assertNoSysTime() {
	h.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.pid))
	if err != nil {
		h.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			mask, ok := new(big.Int).SetString(strings.TrimSpace(v), 16)
			if !ok || mask.Bit(25) != 0 { // CAP_SYS_TIME
				h.t.Fatalf("%s: the container's bounding set %s holds CAP_SYS_TIME: refusing to run ptp4l in it", h.name, strings.TrimSpace(v))
			}
			return
		}
	}
	h.t.Fatalf("%s: no CapBnd in /proc/%d/status", h.name, h.pid)
}

// setConfKeys sets "key value" lines of a linuxptp configuration file,
// appending the keys it lacks to [global].
func setConfKeys(t *testing.T, path string, kv [][2]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for _, p := range kv {
		done := false
		for i, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == p[0] {
				lines[i], done = p[0]+"\t\t"+p[1], true
				break
			}
		}
		if !done {
			for i, l := range lines {
				if strings.TrimSpace(l) == "[global]" {
					lines = append(lines[:i+1], append([]string{p[0] + "\t\t" + p[1]}, lines[i+1:]...)...)
					break
				}
			}
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// editYAML sets keys (dotted paths) of an installed YAML configuration,
// keeping its comments, as an operator's editor would.
func editYAML(t *testing.T, path string, kv map[string]any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for key, v := range kv {
		if err := setYAML(doc.Content[0], strings.Split(key, "."), v); err != nil {
			t.Fatalf("%s: %s: %v", path, key, err)
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func setYAML(n *yaml.Node, path []string, v any) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("not a mapping")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != path[0] {
			continue
		}
		if len(path) > 1 {
			return setYAML(n.Content[i+1], path[1:], v)
		}
		var nv yaml.Node
		if err := nv.Encode(v); err != nil {
			return err
		}
		nv.LineComment = n.Content[i+1].LineComment
		n.Content[i+1] = &nv
		return nil
	}
	return fmt.Errorf("key %q not in the file", path[0])
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), n)
}
