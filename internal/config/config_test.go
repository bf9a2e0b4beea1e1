package config

import (
	"errors"
	"os"
	"os/exec"
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
		// The daemons refuse the example seed (TestExampleSeedRefused).
		fixed = strings.Replace(fixed, `seed: "change-me"`, `seed: "`+opensslSeed(t)+`"`, 1)
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
		{"sketch:\n  seed: change-me\n", "openssl rand -hex 16"},
		{"receiver:\n  max_interval_skew: 5s\n", "receiver.max_interval_skew"},
		{"receiver:\n  max_connections: 0\n", "receiver.max_connections"},
	}
	for _, c := range cases {
		r := DefaultReceiver()
		r.Sketch.Seed = "3f1c0a9be47d25c8a1f6d0e2b9c47a15"
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

// TestFingerprintDiffNamesKeys: the fingerprint names the differing
// non-secret keys, and holds nothing derived from the seed (the seed is
// proven on the wire with wire.SeedProof).
func TestFingerprintDiffNamesKeys(t *testing.T) {
	a, b := DefaultCommon(), DefaultCommon()
	b.Sketch.Seed = "other"
	b.Sketch.Columns = 8192
	b.Interval *= 2
	d := wire.DiffFingerprints(a.Fingerprint(), b.Fingerprint())
	want := []string{"interval", "sketch.columns"}
	if !slices.Equal(d, want) {
		t.Errorf("diff %v, want %v (the seed is not in the fingerprint)", d, want)
	}
	for k, v := range a.Fingerprint() {
		if strings.Contains(k, "seed") || strings.Contains(v, "change-me") {
			t.Errorf("fingerprint entry %s=%s: nothing about the seed may be in it", k, v)
		}
	}
	c := DefaultCommon()
	if len(wire.DiffFingerprints(a.Fingerprint(), c.Fingerprint())) != 0 {
		t.Error("equal configurations must not differ")
	}
}

// TestFingerprintOneHashVersion: the fingerprint carries one hash version,
// config.HashVersion under "hash_version", and the check between the ends
// refuses a peer whose derivation differs: one built with another hash
// version, and one from a build that still sent the capture layout's own
// "capture.hash_version" beside it (docs/protocol.md, "Versions").
func TestFingerprintOneHashVersion(t *testing.T) {
	c := DefaultCommon()
	fp := c.Fingerprint()
	var versions []string
	for k := range fp {
		if strings.Contains(k, "version") {
			versions = append(versions, k)
		}
	}
	if !slices.Equal(versions, []string{"hash_version"}) || fp["hash_version"] != HashVersion {
		t.Fatalf("version keys %v (hash_version %q), want only hash_version = %q", versions, fp["hash_version"], HashVersion)
	}
	tests := []struct {
		name string
		peer func(map[string]string)
		want []string
	}{
		{"same build", func(map[string]string) {}, nil},
		{"another derivation", func(m map[string]string) { m["hash_version"] = "3" }, []string{"hash_version"}},
		{"a build with a second, capture-layout version", func(m map[string]string) { m["capture.hash_version"] = HashVersion },
			[]string{"capture.hash_version"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			other := DefaultCommon()
			peer := other.Fingerprint()
			tc.peer(peer)
			if d := wire.DiffFingerprints(fp, peer); !slices.Equal(d, tc.want) {
				t.Errorf("differing keys %v, want %v", d, tc.want)
			}
		})
	}
}

// opensslSeed is a seed made as the docs and the refusal say: `openssl rand -hex 16`.
func opensslSeed(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("openssl", "rand", "-hex", "16").Output()
	if err != nil {
		t.Fatalf("openssl rand -hex 16 (the command the seed refusal gives): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestExampleSeedRefused: both daemons refuse the shipped example seed, an
// empty one and the other seeds lds publishes, naming the key and the
// command that makes a secret one; a seed from that command is accepted;
// replay accepts the examples (captured files, one host).
func TestExampleSeedRefused(t *testing.T) {
	for _, seed := range []string{"change-me", "", "demo-seed", "paper-eval"} {
		s := DefaultSender()
		s.Sketch.Seed = seed
		s.Sender.TLS.Plaintext = true
		s.Capture.Source.Interface = "eth1"
		r := DefaultReceiver()
		r.Sketch.Seed = seed
		r.Receiver.TLS.Plaintext = true
		r.Capture.Source.Interface = "eth1"
		for name, err := range map[string]error{"sender": s.Validate(), "receiver": r.Validate()} {
			if err == nil || !strings.Contains(err.Error(), "sketch.seed") || (seed != "" && !strings.Contains(err.Error(), "openssl rand -hex 16")) {
				t.Errorf("%s with seed %q: %v, want a refusal naming sketch.seed and openssl rand -hex 16", name, seed, err)
			}
		}
		if seed != "" {
			if err := r.ValidateReplay(); err != nil {
				t.Errorf("replay with seed %q: %v", seed, err)
			}
		}
	}
	seed := opensslSeed(t)
	s := DefaultSender()
	s.Sketch.Seed = seed
	s.Sender.TLS.Plaintext = true
	s.Capture.Source.Interface = "eth1"
	r := DefaultReceiver()
	r.Sketch.Seed = seed
	r.Receiver.TLS.Plaintext = true
	r.Capture.Source.Interface = "eth1"
	if err := errors.Join(s.Validate(), r.Validate()); err != nil {
		t.Errorf("a seed from openssl rand -hex 16 (%s) refused: %v", seed, err)
	}
	// The shipped files as they are: refused until the seed is replaced.
	for _, f := range []string{"sender.yaml", "receiver.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "configs", f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), f)
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), `interface: ""`, `interface: "eth1"`, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		load := LoadReceiver
		if f == "sender.yaml" {
			_, err = LoadSender(p)
		} else {
			_, err = load(p)
		}
		if err == nil || !strings.Contains(err.Error(), "openssl rand -hex 16") {
			t.Errorf("shipped %s loaded as is: %v, want the seed refusal", f, err)
		}
	}
}

// TestUnknownKeyNamesThePath: an unknown key is named by its dotted path
// and line, with the keys its section has, never by a Go type, and the
// message points at documentation an installed host has.
func TestUnknownKeyNamesThePath(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"in a section", "sketch:\n  rows: 3\n  rowz: 4\n", []string{"sketch.rowz (line 3): unknown key; sketch has: alpha, bytes, columns"}},
		{"at the top", "interval: 1s\nintervall: 2s\n", []string{"intervall (line 2): unknown key; the top level has: capture"}},
		{"in a list", "receiver:\n  senders: [{id: a, selct: []}]\n", []string{"receiver.senders[0].selct (line 2): unknown key; receiver.senders[0] has: id, select"}},
		{"deep", "capture:\n  source:\n    promisc: true\n", []string{"capture.source.promisc (line 3): unknown key; capture.source has:", "promiscuous"}},
		{"two at once", "foo: 1\nptp: {enabld: true}\n", []string{"foo (line 1)", "ptp.enabld (line 2)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultReceiver()
			err := Decode(strings.NewReader(tc.yaml), &c, "r.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range append(tc.want, "/usr/share/doc/lds/docs/config.md") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, bad := range []string{"not found in type", "config.Sketch", "configs/"} {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("error %q says %q: a Go type, or a directory installed hosts do not have", err, bad)
				}
			}
		})
	}
}
