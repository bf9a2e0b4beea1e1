package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/internal/version"
	"github.com/lds-net/lds/test/testutil"
)

// TestRun runs lds-sender's main in process: what --help, --version,
// --check-config and the failures print, and the exit codes systemd and
// scripts see (0; 2 for a bad flag or configuration; 1 when the pipeline
// stops on an error).
func TestRun(t *testing.T) {
	dir := t.TempDir()
	// A file source that does not exist: valid, and Run fails at once.
	yaml := `sketch: {seed: "00112233445566778899aabbccddeeff"}
ptp: {enabled: false}
metrics: {listen: "127.0.0.1:0"}
sender: {receiver: "127.0.0.1:1", tls: {plaintext: true}}
capture: {source: {kind: file, file: ` + filepath.Join(dir, "none.pcap") + `}}
`
	// present: the same with a capture file that exists, the preflight passes.
	cfg, present, missing := testutil.DaemonConfigs(t, dir, "sender", yaml)
	// No capture section: kind afpacket needs an interface, which a flag gives.
	noIface := filepath.Join(dir, "noiface.yaml")
	testutil.WriteFile(t, noIface, strings.SplitAfter(yaml, "tls: {plaintext: true}}\n")[0])
	testutil.RunMain(t, run, []testutil.MainCase{
		{Name: "help", Args: []string{"-h"}, Stderr: []string{"Usage: lds-sender [flags]\n\nSketches the packets at the upstream tap and streams them to lds-receiver.\n\nFlags:\n  -check-config",
			"-config string\n    \tconfiguration file (see configs/sender.yaml for every key) (default \"/etc/lds/sender.yaml\")",
			"-interface string", "-log-level string", "-receiver string", "-version"}},
		{Name: "bad flag", Args: []string{"--nope"}, Code: cli.ExitUsage, Stderr: []string{"flag provided but not defined: -nope\nUsage: lds-sender"}},
		{Name: "version", Args: []string{"--version", "--config", missing}, Stdout: "lds-sender " + version.Version + "\n"},
		{Name: "check: the preflight fails on a missing capture file", Args: []string{"--config", cfg, "--check-config"}, Code: cli.ExitUsage, Stdout: "...lds-sender would not run as configured: 1 failed, "},
		{Name: "check", Args: []string{"--config", present, "--check-config"}, Stdout: "...configuration OK: "},
		{Name: "missing file", Args: []string{"--config", missing, "--check-config"}, Code: cli.ExitUsage, Stderr: []string{"lds-sender: configuration " + missing + ": "}},
		{Name: "a flag over the file fails validation", Args: []string{"--config", cfg, "--log-level", "loud"}, Code: cli.ExitUsage, Stderr: []string{"lds-sender: configuration " + cfg + ": ", "log.level"}},
		{Name: "flags over the file", Args: []string{"--config", present, "--receiver", "127.0.0.1:2", "--interface", "lo", "--log-level", "debug", "--check-config"}, Stdout: "...configuration OK: "},
		{Name: "a flag gives a key the file lacks", Args: []string{"--config", noIface, "--interface", "lo", "--check-config"}, Stdout: "...configuration OK: "},
		{Name: "without the flag it is missing", Args: []string{"--config", noIface, "--check-config"}, Code: cli.ExitUsage, Stderr: []string{"capture.source.interface: required"}},
		{Name: "run fails", Args: []string{"--config", cfg}, Code: cli.ExitFailed, Stderr: []string{`msg="lds-sender stopped"`, "none.pcap"}},
	})
}
