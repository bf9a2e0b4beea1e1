package jsonl

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type rec struct {
	A int    `json:"a"`
	B string `json:"b"`
}

func checkB(r *rec) error {
	if r.B == "" {
		return errors.New("no b")
	}
	return nil
}

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		maxLine  int
		want     int    // records returned
		err      string // "" = none; else the whole error
	}{
		{"empty", "", 100, 0, ""},
		{"blank lines", "\n{\"a\":1,\"b\":\"x\"}\n\n{\"b\":\"y\"}\n", 100, 2, ""},
		{"bad json", "{\"a\":1,\"b\":\"x\"}\n{\"a\":\n", 100, 1, "recs line 2: unexpected end of JSON input"},
		{"check refuses", "{\"a\":1,\"b\":\"x\"}\n\n{\"a\":2}\n", 100, 1, "recs line 3: no b"},
		{"line too long", "{\"a\":1,\"b\":\"x\"}\n{\"b\":\"" + strings.Repeat("y", 200<<10) + "\"}\n", 100 << 10, 1, "read recs after line 1: bufio.Scanner: token too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(strings.NewReader(tc.in), "recs", tc.maxLine, checkB)
			if len(got) != tc.want {
				t.Errorf("%d records, want %d", len(got), tc.want)
			}
			if err != nil {
				if msg := err.Error(); msg != tc.err {
					t.Errorf("error %q, want %q", msg, tc.err)
				}
			} else if tc.err != "" {
				t.Errorf("no error, want %q", tc.err)
			}
		})
	}
}

func TestReadFreshRecordPerLine(t *testing.T) {
	got, err := Read[rec](strings.NewReader("{\"a\":1,\"b\":\"x\"}\n{\"b\":\"y\"}\n"), "recs", 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[1].A != 0 {
		t.Errorf("second record kept the first's a: %+v", got[1])
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	bad := filepath.Join(dir, "bad.jsonl")
	missing := filepath.Join(dir, "missing.jsonl")
	for p, s := range map[string]string{good: "{\"b\":\"x\"}\n", bad: "{\"a\":1}\n"} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(r io.Reader) ([]rec, error) { return Read(r, "recs", 100, checkB) }
	for _, tc := range []struct {
		path string
		want int
		err  string
	}{
		{good, 1, ""},
		{bad, 0, bad + ": recs line 1: no b"},
		{missing, 0, "open recs file: open " + missing + ": no such file or directory"},
	} {
		got, err := ReadFile(tc.path, "recs file", read)
		if len(got) != tc.want {
			t.Errorf("%s: %d records, want %d", tc.path, len(got), tc.want)
		}
		if err != nil {
			if msg := err.Error(); msg != tc.err {
				t.Errorf("%s: error %q, want %q", tc.path, msg, tc.err)
			}
		} else if tc.err != "" {
			t.Errorf("%s: no error, want %q", tc.path, tc.err)
		}
	}
}
