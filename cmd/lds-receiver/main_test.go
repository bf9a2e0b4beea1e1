package main

import (
	"path/filepath"
	"testing"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/version"
	"github.com/lds-net/lds/test/testutil"
)

// TestRun runs lds-receiver's main in process: what --help, --version,
// --check-config and the failures print, and the exit codes systemd and
// scripts see (0; 2 for a bad flag or configuration; 1 when the pipeline
// stops on an error).
func TestRun(t *testing.T) {
	dir := t.TempDir()
	// A file source that does not exist: valid, and Run fails at once.
	yaml := `sketch: {seed: "00112233445566778899aabbccddeeff"}
ptp: {enabled: false}
metrics: {listen: "127.0.0.1:0"}
receiver: {listen: "127.0.0.1:0", tls: {plaintext: true}}
capture: {source: {kind: file, file: ` + filepath.Join(dir, "none.pcap") + `}}
`
	// present: the same with a capture file that exists, the preflight passes.
	cfg, present, missing := testutil.DaemonConfigs(t, dir, "receiver", yaml)
	testutil.RunMain(t, run, []testutil.MainCase{
		{Name: "help", Args: []string{"-h"}, Stderr: []string{"Usage: lds-receiver [flags]\n\nMeasures per-flow one-way delay and loss against lds-sender at the upstream tap.\n\nFlags:\n  -check-config",
			"-config string\n    \tconfiguration file (see configs/receiver.yaml for every key) (default \"/etc/lds/receiver.yaml\")",
			"-interface string", "-listen string", "-log-level string", "-results string", "-version"}},
		{Name: "bad flag", Args: []string{"--nope"}, Code: cli.ExitUsage, Stderr: []string{"flag provided but not defined: -nope\nUsage: lds-receiver"}},
		{Name: "version", Args: []string{"--version", "--config", missing}, Stdout: "lds-receiver " + version.Version + "\n"},
		{Name: "check: the preflight fails on a missing capture file", Args: []string{"--config", cfg, "--check-config"}, Code: cli.ExitUsage, Stdout: "...lds-receiver would not run as configured: 1 failed, "},
		{Name: "check", Args: []string{"--config", present, "--check-config"}, Stdout: "...configuration OK: "},
		{Name: "missing file", Args: []string{"--config", missing, "--check-config"}, Code: cli.ExitUsage, Stderr: []string{"lds-receiver: configuration " + missing + ": "}},
		{Name: "a flag over the file fails validation", Args: []string{"--config", cfg, "--log-level", "loud"}, Code: cli.ExitUsage, Stderr: []string{"lds-receiver: configuration " + cfg + ": ", "log.level"}},
		{Name: "flags over the file", Args: []string{"--config", present, "--listen", "127.0.0.1:0", "--results", filepath.Join(dir, "r.jsonl"), "--interface", "lo", "--log-level", "debug", "--check-config"}, Stdout: "...configuration OK: "},
		{Name: "run fails", Args: []string{"--config", cfg}, Code: cli.ExitFailed, Stderr: []string{`msg="lds-receiver stopped"`, "none.pcap"}},
	})
}
