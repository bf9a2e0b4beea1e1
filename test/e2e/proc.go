package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/lds-net/lds/tools/linkem"
)

// proc is a child process running in a namespace (ip netns exec execs
// the program in place, so the pid is the program's own).
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

func startIn(ns, name, logPath string, argv ...string) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("testbed: %s log: %w", name, err)
	}
	args := append([]string{"netns", "exec", ns}, argv...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("testbed: start %s (%s): %w", name, strings.Join(argv, " "), err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); lf.Close() }()
	return p, nil
}

// exited reports an early exit of the process, with its log's tail.
func (p *proc) exited() error {
	select {
	case err := <-p.done:
		p.done <- err
		return fmt.Errorf("testbed: %s exited early (%w); log %s:\n%s", p.name, err, p.log, tail(p.log, 2000))
	default:
		return nil
	}
}

// stop sends SIGTERM, waits up to grace, then kills. A clean exit after
// SIGTERM is not an error.
func (p *proc) stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err == nil {
			return nil
		}
		// An exit status of 0, or death by our SIGTERM, is a clean stop; a
		// failure to wait (no *exec.ExitError) is not.
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ee.ExitCode() == 0 {
				return nil
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
				return nil
			}
		}
		return fmt.Errorf("testbed: %s: %w; log %s:\n%s", p.name, err, p.log, tail(p.log, 2000))
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("testbed: %s did not stop within %v after SIGTERM; killed", p.name, grace)
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// waitLog waits until the log contains s, the process exits, or timeout.
func (p *proc) waitLog(s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(p.log); bytes.Contains(b, []byte(s)) {
			return nil
		}
		if err := p.exited(); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("testbed: %s did not log %q within %v; log %s:\n%s", p.name, s, timeout, p.log, tail(p.log, 2000))
}

// httpGetIn fetches url from inside the network namespace netns (path).
func httpGetIn(ctx context.Context, netns, url string) (string, error) {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := linkem.InNetns(netns, func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// metricLines returns the exposition lines whose metric name starts with
// one of the prefixes.
func metricLines(body string, prefixes ...string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}
