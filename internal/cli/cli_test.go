package cli

import (
	"bytes"
	"flag"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		exit   bool
		stderr string // all of what the flag set printed
	}{
		{"no flags", nil, 0, false, ""},
		{"a flag", []string{"-n", "4"}, 0, false, ""},
		{"help", []string{"-h"}, 0, true, "Usage: x [flags]\n\n  -n int\n    \thow many (default 3)\n"},
		{"bad flag", []string{"--nope"}, ExitUsage, true, "flag provided but not defined: -nope\nUsage: x [flags]\n\n  -n int\n    \thow many (default 3)\n"},
		{"bad value", []string{"-n", "x"}, ExitUsage, true, "invalid value \"x\" for flag -n: parse error\nUsage: x [flags]\n\n  -n int\n    \thow many (default 3)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := NewFlagSet("x", flag.ContinueOnError, "Usage: x [flags]\n\n")
			var out bytes.Buffer
			fs.SetOutput(&out)
			fs.Int("n", 3, "how many")
			code, exit := Parse(fs, tc.args)
			if code != tc.code || exit != tc.exit {
				t.Errorf("Parse = %d, %v; want %d, %v", code, exit, tc.code, tc.exit)
			}
			if out.String() != tc.stderr {
				t.Errorf("printed %q, want %q", out.String(), tc.stderr)
			}
		})
	}
}
