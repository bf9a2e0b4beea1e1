package main

import (
	"path/filepath"
	"testing"

	"github.com/lds-net/lds/internal/cli"
	"github.com/lds-net/lds/test/testutil"
)

// TestRunMain runs lds-linkem's main in process up to the relay: what
// --help, --check-config and the failures print, and the exit codes.
func TestRunMain(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "linkem.yaml")
	testutil.WriteFile(t, cfg, "a: veth-a\nb: veth-b\n")
	missing := filepath.Join(dir, "missing.yaml")
	testutil.RunMain(t, runMain, []testutil.MainCase{
		{Name: "help", Args: []string{"-h"}, Stderr: []string{"Usage: lds-linkem --config FILE [flags]\n\nRelays frames between interfaces a and b with emulated delay and loss.\n\nFlags:\n  -a string"}},
		{Name: "bad flag", Args: []string{"--version"}, Code: cli.ExitUsage, Stderr: []string{"flag provided but not defined: -version"}},
		{Name: "check", Args: []string{"--config", cfg, "--check-config"}, Stdout: "configuration OK\n"},
		{Name: "interfaces by flag", Args: []string{"--a", "x", "--b", "y", "--check-config"}, Stdout: "configuration OK\n"},
		{Name: "missing file", Args: []string{"--config", missing}, Code: cli.ExitUsage, Stderr: []string{"lds-linkem: configuration " + missing + ": "}},
	})
}
