package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lds-net/lds/test/testutil"
)

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// syncBuffer is a bytes.Buffer a process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

var turnOff = regexp.MustCompile(`turn it off with: (ethtool -K \S+(?: \S+ off)+)`)

// TestStartupTapStates runs the lds-receiver binary, as an operator
// would, on an AF_PACKET tap in a network namespace: with GRO on it
// refuses to start and prints the ethtool command; with
// capture.source.allow_coalescing it starts anyway, with a warning; after
// the printed command it starts. With the tap down it starts anyway and keeps running through
// the link coming up, going down and coming up again, logging each
// change once, and stops cleanly on SIGTERM.
func TestStartupTapStates(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "ethtool", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "needs %s", tool)
		}
	}
	tag := fmt.Sprintf("%d-%d", os.Getpid(), rand.IntN(100000))
	nsA, nsB := "ldsstart-"+tag+"-a", "ldsstart-"+tag+"-b"
	ifA := fmt.Sprintf("ls%d%da", os.Getpid()%100000, rand.IntN(1000))
	ifB := ifA[:len(ifA)-1] + "b"
	for _, ns := range []string{nsA, nsB} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	sh(t, "ip", "-n", nsA, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", nsB)
	sh(t, "ip", "-n", nsA, "link", "set", ifA, "up")
	sh(t, "ip", "-n", nsB, "link", "set", "lo", "up")
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "up")
	sh(t, "ip", "netns", "exec", nsB, "ethtool", "-K", ifB, "gro", "on")

	dir := t.TempDir()
	bin := filepath.Join(dir, "lds-receiver")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "receiver.yaml")
	yaml := fmt.Sprintf(`sketch: {seed: "%x"}
ptp: {enabled: false}
metrics: {listen: "127.0.0.1:0"}
receiver: {listen: "127.0.0.1:0", tls: {plaintext: true}}
capture: {source: {kind: afpacket, interface: %s}}
`, rand.Uint64(), ifB)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func() *exec.Cmd {
		return exec.CommandContext(ctx, "ip", "netns", "exec", nsB, bin, "--config", cfg)
	}

	// GRO on: refused, with the command.
	out, err := run().CombinedOutput()
	if err == nil {
		t.Fatalf("started with GRO on:\n%s", out)
	}
	m := turnOff.FindSubmatch(out)
	if m == nil {
		t.Fatalf("refusal without the ethtool command:\n%s", out)
	}
	t.Logf("refused: %s", strings.TrimSpace(string(out)))

	// The override key: GRO still on, allow_coalescing: the daemon runs.
	allowCfg := filepath.Join(dir, "allow.yaml")
	if err := os.WriteFile(allowCfg, []byte(strings.Replace(yaml, "interface: "+ifB, "interface: "+ifB+", allow_coalescing: true", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var allowLogs syncBuffer
	allow := exec.CommandContext(ctx, "ip", "netns", "exec", nsB, bin, "--config", allowCfg)
	allow.Stdout, allow.Stderr = &allowLogs, &allowLogs
	if err := allow.Start(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(allowLogs.String(), "afpacket source open") {
		if ctx.Err() != nil {
			t.Fatalf("no start with allow_coalescing:\n%s", allowLogs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(allowLogs.String(), "allowed by capture.source.allow_coalescing") {
		t.Errorf("no warning that coalescing is allowed:\n%s", allowLogs.String())
	}
	allow.Process.Signal(syscall.SIGTERM)
	if err := allow.Wait(); err != nil {
		t.Errorf("allow_coalescing run: %v\n%s", err, allowLogs.String())
	}

	// The advice, word for word; then the tap goes down before the start.
	sh(t, append([]string{"ip", "netns", "exec", nsB}, strings.Fields(string(m[1]))...)...)
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "down")

	var logs syncBuffer
	cmd := run()
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	waitLog := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for strings.Count(logs.String(), what) < n {
			select {
			case err := <-exited:
				t.Fatalf("lds-receiver exited (%v) waiting for %q:\n%s", err, what, logs.String())
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %d× %q in the log:\n%s", n, what, logs.String())
			}
		}
	}
	waitLog("capture interface is down", 1)
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "up")
	waitLog("capture interface is up", 1)
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "down")
	waitLog("capture interface is down", 2)
	sh(t, "ip", "-n", nsB, "link", "set", ifB, "up")
	waitLog("capture interface is up", 2)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit after SIGTERM:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), "capture interface is down"); n != 2 {
		t.Errorf("%d log lines for 2 outages:\n%s", n, logs.String())
	}
}
