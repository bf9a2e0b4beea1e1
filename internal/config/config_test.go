package config

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/wire"

	"gopkg.in/yaml.v3"
)

func keys(t *testing.T, prefix string, v any, out *[]string) {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		*out = append(*out, p)
		keys(t, p, sub, out)
	}
}

func keySet(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var out []string
	keys(t, "", m, &out)
	sort.Strings(out)
	return out
}

// TestShippedConfigsDocumentEveryKey: configs/*.yaml load, validate, and
// show exactly the keys the daemons know (so no key goes undocumented).
func TestShippedConfigsDocumentEveryKey(t *testing.T) {
	for _, tc := range []struct {
		file string
		def  any
		load func(string) error
	}{
		{"sender.yaml", DefaultSender(), func(p string) error { _, err := LoadSender(p); return err }},
		{"receiver.yaml", DefaultReceiver(), func(p string) error { _, err := LoadReceiver(p); return err }},
	} {
		path := filepath.Join("..", "..", "configs", tc.file)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The shipped file has TLS paths and an afpacket source without an
		// interface: give it one so that validation can pass.
		dir := t.TempDir()
		fixed := strings.Replace(string(b), `interface: ""`, `interface: "eth1"`, 1)
		p := filepath.Join(dir, tc.file)
		if err := os.WriteFile(p, []byte(fixed), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := tc.load(p); err != nil {
			t.Errorf("%s: %v", tc.file, err)
		}
		d, err := yaml.Marshal(tc.def)
		if err != nil {
			t.Fatal(err)
		}
		got, want := keySet(t, b), keySet(t, d)
		for _, k := range want {
			if !slices.Contains(got, k) && !strings.HasPrefix(k, "capture.identity.seed") {
				t.Errorf("%s: key %s not documented", tc.file, k)
			}
		}
		for _, k := range got {
			if !slices.Contains(want, k) {
				t.Errorf("%s: key %s unknown to the daemon", tc.file, k)
			}
		}
	}
}

func TestBadConfigNamesTheKey(t *testing.T) {
	cases := []struct {
		yaml string
		want string
	}{
		{"sketch:\n  rows: 0\n", "sketch.rows"},
		{"sketch:\n  seed: \"\"\n", "sketch.seed"},
		{"sketch:\n  estimator: magic\n", "sketch.estimator"},
		{"max_delay: 65s\n", "max_delay"},
		{"max_delay: 0s\n", "max_delay"},
		{"guard: 300ms\n", "guard"},
		{"interval: 0s\n", "interval"},
		{"sketch:\n  colums: 5\n", "colums"},
		{"receiver:\n  lateness: 0s\n", "receiver.lateness"},
		{"receiver:\n  tls:\n    plaintext: false\n", "receiver.tls"},
		{"log:\n  level: loud\n", "log.level"},
		{"sketch:\n  heavy: 20000\n", "sketch.heavy"},
		{"capture:\n  classes:\n    - {name: x, dscp: 46}\n", "dscp"},
	}
	for _, c := range cases {
		r := DefaultReceiver()
		r.Receiver.TLS.Plaintext = true
		r.Capture.Source.Interface = "eth1"
		err := Decode(strings.NewReader(c.yaml), &r, "test")
		if err == nil {
			err = r.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %q", c.yaml, err, c.want)
		}
	}
}

func TestFingerprintDiffNamesKeys(t *testing.T) {
	a, b := DefaultCommon(), DefaultCommon()
	b.Sketch.Seed = "other"
	b.Sketch.Columns = 8192
	b.Interval *= 2
	d := wire.DiffFingerprints(a.Fingerprint(), b.Fingerprint())
	want := []string{"interval", "sketch.columns", "sketch.seed"}
	if !slices.Equal(d, want) {
		t.Errorf("diff %v, want %v", d, want)
	}
	for _, v := range a.Fingerprint() {
		if strings.Contains(v, "change-me") {
			t.Error("the seed must never appear in clear in the fingerprint")
		}
	}
	c := DefaultCommon()
	if len(wire.DiffFingerprints(a.Fingerprint(), c.Fingerprint())) != 0 {
		t.Error("equal configurations must not differ")
	}
}
