package testutil

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// MainCase is one run of a program's main in process, and what it must
// print and return.
type MainCase struct {
	Name string
	Args []string
	Code int // the exit code
	// Stdout is all of stdout; with a leading "..." the beginning of its
	// last line.
	Stdout string
	// Stderr lists parts stderr must contain; none: stderr must be empty.
	Stderr []string
}

// RunMain runs each case through run, a main's testable body (arguments
// without the program name, stdout, stderr; it returns the exit code), as
// a subtest named after the case, and checks the exit code and both
// outputs.
func RunMain(t *testing.T, run func(args []string, stdout, stderr io.Writer) int, cases []MainCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.Args, &stdout, &stderr); code != tc.Code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.Code, stderr.String())
			}
			if last, ok := strings.CutPrefix(tc.Stdout, "..."); ok {
				lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
				if !strings.HasPrefix(lines[len(lines)-1], last) {
					t.Errorf("stdout ends with %q, want %q...", lines[len(lines)-1], last)
				}
			} else if stdout.String() != tc.Stdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.Stdout)
			}
			if len(tc.Stderr) == 0 && stderr.Len() > 0 {
				t.Errorf("stderr %q, want none", stderr.String())
			}
			for _, want := range tc.Stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr %q, want it to contain %q", stderr.String(), want)
				}
			}
		})
	}
}

// WriteFile writes data to path (mode 0600) or fails the test.
func WriteFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// DaemonConfigs writes a daemon's configuration for its main's tests:
// yaml, whose capture file dir/none.pcap does not exist, as
// dir/<role>.yaml (cfg), and the same with an empty capture file that
// exists as dir/present.yaml (present). missing is dir/missing.yaml,
// which does not exist.
func DaemonConfigs(t testing.TB, dir, role, yaml string) (cfg, present, missing string) {
	t.Helper()
	cfg, present, missing = filepath.Join(dir, role+".yaml"), filepath.Join(dir, "present.yaml"), filepath.Join(dir, "missing.yaml")
	WriteFile(t, cfg, yaml)
	WriteFile(t, present, strings.Replace(yaml, "none.pcap", "present.pcap", 1))
	WriteFile(t, filepath.Join(dir, "present.pcap"), "")
	return cfg, present, missing
}
