package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/version"
)

// TestRun runs lds-sender's main in process: what --help, --version,
// --check-config and the failures print, and the exit codes systemd and
// scripts see (0; 2 for a bad flag or configuration; 1 when the pipeline
// stops on an error).
func TestRun(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sender.yaml")
	// A file source that does not exist: valid, and Run fails at once.
	yaml := `sketch: {seed: "00112233445566778899aabbccddeeff"}
ptp: {enabled: false}
metrics: {listen: "127.0.0.1:0"}
sender: {receiver: "127.0.0.1:1", tls: {plaintext: true}}
capture: {source: {kind: file, file: ` + filepath.Join(dir, "none.pcap") + `}}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	// The same with a capture file that exists: the preflight passes.
	present := filepath.Join(dir, "present.yaml")
	if err := os.WriteFile(present, []byte(strings.Replace(yaml, "none.pcap", "present.pcap", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "present.pcap"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// No capture section: kind afpacket needs an interface, which a flag gives.
	noIface := filepath.Join(dir, "noiface.yaml")
	if err := os.WriteFile(noIface, []byte(strings.SplitAfter(yaml, "tls: {plaintext: true}}\n")[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	for _, tc := range []struct {
		name string
		args []string
		code int
		// All of stdout (a leading "..." : its last line); parts of stderr
		// ("" none: stderr empty).
		stdout string
		stderr []string
	}{
		{"help", []string{"-h"}, 0, "", []string{"Usage: lds-sender [flags]\n\nSketches the packets at the upstream tap and streams them to lds-receiver.\n\nFlags:\n  -check-config",
			"-config string\n    \tconfiguration file (see configs/sender.yaml for every key) (default \"/etc/lds/sender.yaml\")",
			"-interface string", "-log-level string", "-receiver string", "-version"}},
		{"bad flag", []string{"--nope"}, cli.ExitUsage, "", []string{"flag provided but not defined: -nope\nUsage: lds-sender"}},
		{"version", []string{"--version", "--config", missing}, 0, "lds-sender " + version.Version + "\n", nil},
		{"check: the preflight fails on a missing capture file", []string{"--config", cfg, "--check-config"}, cli.ExitUsage, "...lds-sender would not run as configured: 1 failed, ", nil},
		{"check", []string{"--config", present, "--check-config"}, 0, "...configuration OK: ", nil},
		{"missing file", []string{"--config", missing, "--check-config"}, cli.ExitUsage, "", []string{"lds-sender: configuration " + missing + ": "}},
		{"a flag over the file fails validation", []string{"--config", cfg, "--log-level", "loud"}, cli.ExitUsage, "", []string{"lds-sender: configuration " + cfg + ": ", "log.level"}},
		{"flags over the file", []string{"--config", present, "--receiver", "127.0.0.1:2", "--interface", "lo", "--log-level", "debug", "--check-config"}, 0, "...configuration OK: ", nil},
		{"a flag gives a key the file lacks", []string{"--config", noIface, "--interface", "lo", "--check-config"}, 0, "...configuration OK: ", nil},
		{"without the flag it is missing", []string{"--config", noIface, "--check-config"}, cli.ExitUsage, "", []string{"capture.source.interface: required"}},
		{"run fails", []string{"--config", cfg}, cli.ExitFailed, "", []string{`msg="lds-sender stopped"`, "none.pcap"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if last, ok := strings.CutPrefix(tc.stdout, "..."); ok {
				lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
				if !strings.HasPrefix(lines[len(lines)-1], last) {
					t.Errorf("stdout ends with %q, want %q...", lines[len(lines)-1], last)
				}
			} else if stdout.String() != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.stdout)
			}
			if len(tc.stderr) == 0 && stderr.Len() > 0 {
				t.Errorf("stderr %q, want none", stderr.String())
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr %q, want it to contain %q", stderr.String(), want)
				}
			}
		})
	}
}
