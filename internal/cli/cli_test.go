package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
)

type testConfig struct{ Name string }

func testDaemon(version string, ran *bool) Daemon[testConfig] {
	return Daemon[testConfig]{
		Name:       "lds-test",
		Usage:      "Usage: lds-test [flags]\n\nFlags:\n",
		ConfigPath: "/etc/lds/test.yaml",
		ConfigHelp: "configuration file",
		Version:    version,
		Flags: func(fs *flag.FlagSet) func(*testConfig) {
			name := fs.String("name", "", "overrides name")
			return func(c *testConfig) {
				if *name != "" {
					c.Name = *name
				}
			}
		},
		Load: func(path string) (testConfig, error) {
			if path == "missing" {
				return testConfig{}, errors.New("no such file")
			}
			return testConfig{Name: "file"}, nil
		},
		Validate: func(c *testConfig) error {
			if c.Name == "bad" {
				return errors.New("name: bad")
			}
			return nil
		},
		Logger: func(_ *testConfig, w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) },
		New: func(c testConfig, _ *slog.Logger) (Runner, error) {
			if c.Name == "unbuildable" {
				return nil, errors.New("cannot build")
			}
			return RunFunc(func(context.Context) error {
				*ran = true
				if c.Name == "failing" {
					return errors.New("it broke")
				}
				return nil
			}), nil
		},
	}
}

func TestDaemonMain(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		args          []string
		code          int
		ran           bool // whether the pipeline ran
		// All of stdout; a part of stderr, "" for none.
		stdout, stderr string
	}{
		{"runs", "", nil, 0, true, "", ""},
		{"help", "", []string{"-h"}, 0, false, "", "Usage: lds-test [flags]\n\nFlags:\n  -check-config"},
		{"bad flag", "", []string{"--nope"}, ExitUsage, false, "", "flag provided but not defined: -nope\nUsage: lds-test"},
		{"no --version without a version", "", []string{"--version"}, ExitUsage, false, "", "flag provided but not defined: -version"},
		{"version", "1.2.3", []string{"--version", "--config", "missing"}, 0, false, "lds-test 1.2.3\n", ""},
		{"check", "", []string{"--check-config"}, 0, false, "configuration OK\n", ""},
		{"load fails", "", []string{"--config", "missing", "--check-config"}, ExitUsage, false, "", "lds-test: configuration missing: no such file\n"},
		{"flag over the file fails validation", "", []string{"--name", "bad"}, ExitUsage, false, "", "lds-test: configuration /etc/lds/test.yaml: name: bad\n"},
		{"cannot build", "", []string{"--name", "unbuildable"}, ExitFailed, false, "", `msg="lds-test stopped" err="cannot build"`},
		{"run fails", "", []string{"--name", "failing"}, ExitFailed, true, "", `msg="lds-test stopped" err="it broke"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			ran := false
			code := testDaemon(tc.version, &ran).Main(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			if ran != tc.ran {
				t.Errorf("ran %v, want %v", ran, tc.ran)
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

func TestNewFlagSetUsage(t *testing.T) {
	fs := NewFlagSet("x", flag.ContinueOnError, "Usage: x [flags]\n\n")
	var out bytes.Buffer
	fs.SetOutput(&out)
	fs.Int("n", 3, "how many")
	fs.Usage()
	if want := "Usage: x [flags]\n\n  -n int\n    \thow many (default 3)\n"; out.String() != want {
		t.Errorf("usage %q, want %q", out.String(), want)
	}
}
