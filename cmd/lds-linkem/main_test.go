package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/cli"
)

// TestRunMain runs lds-linkem's main in process up to the relay: what
// --help, --check-config and the failures print, and the exit codes.
func TestRunMain(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "linkem.yaml")
	if err := os.WriteFile(cfg, []byte("a: veth-a\nb: veth-b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string // a part of stderr; "" for none
	}{
		{"help", []string{"-h"}, 0, "", "Usage: lds-linkem --config FILE [flags]\n\nRelays frames between interfaces a and b with emulated delay and loss.\n\nFlags:\n  -a string"},
		{"bad flag", []string{"--version"}, cli.ExitUsage, "", "flag provided but not defined: -version"},
		{"check", []string{"--config", cfg, "--check-config"}, 0, "configuration OK\n", ""},
		{"interfaces by flag", []string{"--a", "x", "--b", "y", "--check-config"}, 0, "configuration OK\n", ""},
		{"missing file", []string{"--config", missing}, cli.ExitUsage, "", "lds-linkem: configuration " + missing + ": "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runMain(tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if stdout.String() != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.stdout)
			}
			if tc.stderr == "" && stderr.Len() > 0 || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tc.stderr)
			}
		})
	}
}
