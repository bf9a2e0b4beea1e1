package preflight

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/test/testutil"
)

// pki writes a CA and certificates it (or another CA) issued, as PEM
// files in dir.
type pki struct {
	t      *testing.T
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func newPKI(t *testing.T, dir, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	p := &pki{t: t, dir: dir, caCert: c, caKey: key}
	p.write(name+".crt", "CERTIFICATE", der, 0o644)
	return p
}

func (p *pki) write(name, typ string, der []byte, mode os.FileMode) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// issue writes name.crt (CN cn, for usage) and name.key.
func (p *pki) issue(name, cn string, usage x509.ExtKeyUsage, notAfter time.Time) (cert, key string) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{cn + ".example.net"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &k.PublicKey, p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(k)
	return p.write(name+".crt", "CERTIFICATE", der, 0o644), p.write(name+".key", "PRIVATE KEY", kd, 0o640)
}

// traversable makes dir and its parent (t.TempDir's, mode 0700)
// searchable by every user, so that a case can test one file's mode.
func traversable(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// lines returns the report's lines for key, for failure messages.
func lines(r *Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

// has reports whether r has a finding of level l for key whose message
// or fix contains sub.
func has(r *Report, l Level, key, sub string) bool {
	for _, f := range r.Findings {
		if f.Level == l && f.Key == key && strings.Contains(f.Msg+" "+f.Fix, sub) {
			return true
		}
	}
	return false
}

// TestSender runs the sender's preflight on real files, sockets and
// ports: each case breaks one thing and expects the line that names it.
func TestSender(t *testing.T) {
	dir := t.TempDir()
	traversable(t, dir)
	ca := newPKI(t, dir, "ca")
	other := newPKI(t, dir, "other-ca")
	cert, key := ca.issue("sender", "edge-a", x509.ExtKeyUsageClientAuth, time.Now().Add(24*time.Hour))
	otherCert, otherKey := other.issue("foreign", "edge-a", x509.ExtKeyUsageClientAuth, time.Now().Add(24*time.Hour))
	expired, expiredKey := ca.issue("expired", "edge-a", x509.ExtKeyUsageClientAuth, time.Now().Add(-time.Hour))
	_, key2 := ca.issue("second", "edge-a", x509.ExtKeyUsageClientAuth, time.Now().Add(24*time.Hour))
	worldKey := filepath.Join(dir, "world.key")
	b, _ := os.ReadFile(key)
	if err := os.WriteFile(worldKey, b, 0o644); err != nil {
		t.Fatal(err)
	}
	privKey := filepath.Join(dir, "private.key")
	if err := os.WriteFile(privKey, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A ptp4l stand-in: a bound unix datagram socket; and one whose owner is gone.
	sock := filepath.Join(dir, "ptp4l")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stale := filepath.Join(dir, "stale")
	sl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: stale, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	sl.Close()
	for _, p := range []string{sock, stale} {
		if err := os.Chmod(p, 0o660); err != nil {
			t.Fatal(err)
		}
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	base := func() config.Sender {
		c := config.DefaultSender()
		c.Sketch.Seed = "3f1c9a7be2d4408c95e1d0b6a7f23c18"
		c.Capture.Source.Interface = "lo"
		c.Metrics.Listen = "127.0.0.1:0"
		c.PTP.Socket = sock
		c.Sender.ID = "edge-a"
		c.Sender.Receiver = "127.0.0.1:7420"
		c.Sender.TLS.Cert, c.Sender.TLS.Key, c.Sender.TLS.CA = cert, key, filepath.Join(dir, "ca.crt")
		return c
	}
	type want struct {
		level     Level
		key, text string
	}
	for _, tc := range []struct {
		name   string
		user   string
		edit   func(c *config.Sender)
		want   []want
		failed bool
	}{
		{"all good", "root", func(*config.Sender) {}, []want{{OK, "sender.tls.cert", "chains to"}, {OK, "sender.id", "named by"}, {OK, "ptp.socket", "reachable"},
			{OK, "metrics.listen", "free"}, {OK, "sender.tls.key", "readable by user root"}}, false},
		{"missing key", "root", func(c *config.Sender) { c.Sender.TLS.Key = filepath.Join(dir, "nope.key") }, []want{{Fail, "sender.tls.key", "no such file"}}, true},
		{"key of another certificate", "root", func(c *config.Sender) { c.Sender.TLS.Key = key2 }, []want{{Fail, "sender.tls.cert", "does not go with sender.tls.key"}}, true},
		{"expired certificate", "root", func(c *config.Sender) { c.Sender.TLS.Cert, c.Sender.TLS.Key = expired, expiredKey }, []want{{Fail, "sender.tls.cert", "not valid now"}}, true},
		{"certificate of another CA", "root", func(c *config.Sender) { c.Sender.TLS.Cert, c.Sender.TLS.Key = otherCert, otherKey }, []want{{Warn, "sender.tls.cert", "does not chain to sender.tls.ca"}}, false},
		{"sender.id not in the certificate", "root", func(c *config.Sender) { c.Sender.ID = "edge-b" }, []want{{Fail, "sender.id", `"edge-a", "edge-a.example.net"`}}, true},
		{"world-readable key", "root", func(c *config.Sender) { c.Sender.TLS.Key = worldKey }, []want{{Warn, "sender.tls.key", "readable by every user"}}, false},
		{"key unreadable by the service user", "nobody", func(c *config.Sender) { c.Sender.TLS.Key = privKey }, []want{{Fail, "sender.tls.key", "not readable by user nobody"},
			{Fail, "sender.tls.key", "chgrp nogroup " + privKey + " && chmod 0640"}}, true},
		{"plaintext to a remote receiver", "root", func(c *config.Sender) { c.Sender.TLS.Plaintext = true; c.Sender.Receiver = "192.0.2.7:7420" },
			[]want{{Fail, "sender.tls.plaintext", "refused towards 192.0.2.7:7420, which is not a loopback address (the sender would stop) " +
				"set sender.tls.cert, sender.tls.key and sender.tls.ca and remove sender.tls.plaintext (README, \"Certificates\")"}}, true},
		{"plaintext to loopback", "root", func(c *config.Sender) { c.Sender.TLS.Plaintext = true }, []want{{Warn, "sender.tls.plaintext", "no TLS towards the loopback receiver "}}, false},
		{"weak seed", "root", func(c *config.Sender) { c.Sketch.Seed = "x" }, []want{{Warn, "sketch.seed", "1 characters"}}, false},
		{"metrics port in use", "root", func(c *config.Sender) { c.Metrics.Listen = busy.Addr().String() }, []want{{Fail, "metrics.listen", "address already in use"}}, true},
		{"no ptp4l socket", "root", func(c *config.Sender) { c.PTP.Socket = filepath.Join(dir, "none") }, []want{{Warn, "ptp.socket", "ptp4l is not running"}}, false},
		{"stale ptp4l socket", "root", func(c *config.Sender) { c.PTP.Socket = stale }, []want{{Warn, "ptp.socket", "nothing answers"}}, false},
		{"ptp4l socket not usable by the service user", "nobody", func(c *config.Sender) {}, []want{{Fail, "ptp.socket", "user nobody may not use it"}}, true},
		{"ptp off", "root", func(c *config.Sender) { c.PTP.Enabled = false }, []want{{Warn, "ptp.enabled", "trial"}}, false},
		{"no such interface", "root", func(c *config.Sender) { c.Capture.Source.Interface = "nosuch0" }, []want{{Fail, "capture.source.interface", "no such interface"}}, true},
		{"missing service user", "no-such-user-lds", func(c *config.Sender) {}, []want{{Warn, "(service user)", "does not exist"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			r := Sender(&c, Options{User: tc.user})
			for _, w := range tc.want {
				if !has(r, w.level, w.key, w.text) {
					t.Errorf("no %s line for %s saying %q:\n%s", w.level, w.key, w.text, lines(r))
				}
			}
			if r.Failed() != tc.failed {
				t.Errorf("failed = %v, want %v:\n%s", r.Failed(), tc.failed, lines(r))
			}
		})
	}
}

// TestReceiver: the receiver's own checks (listen port, plaintext,
// results directory).
func TestReceiver(t *testing.T) {
	dir := t.TempDir()
	traversable(t, dir)
	ca := newPKI(t, dir, "ca")
	cert, key := ca.issue("receiver", "receiver", x509.ExtKeyUsageServerAuth, time.Now().Add(24*time.Hour))
	rootOnly := filepath.Join(dir, "root-only")
	if err := os.Mkdir(rootOnly, 0o755); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	base := func() config.Receiver {
		c := config.DefaultReceiver()
		c.Sketch.Seed = "3f1c9a7be2d4408c95e1d0b6a7f23c18"
		c.Capture.Source.Interface = "lo"
		c.Metrics.Listen = "127.0.0.1:0"
		c.PTP.Enabled = false
		c.Receiver.Listen = "127.0.0.1:0"
		c.Receiver.Senders = []config.SenderEntry{{ID: "edge-a"}}
		c.Receiver.TLS.Cert, c.Receiver.TLS.Key, c.Receiver.TLS.ClientCA = cert, key, filepath.Join(dir, "ca.crt")
		return c
	}
	for _, tc := range []struct {
		name      string
		user      string
		edit      func(c *config.Receiver)
		level     Level
		key, text string
		failed    bool
	}{
		{"all good", "root", func(*config.Receiver) {}, OK, "receiver.tls.cert", "chains to", false},
		{"listen port in use", "root", func(c *config.Receiver) { c.Receiver.Listen = busy.Addr().String() }, Fail, "receiver.listen", "ss -ltnp", true},
		{"plaintext on all addresses", "root", func(c *config.Receiver) { c.Receiver.TLS.Plaintext = true; c.Receiver.Listen = ":0" }, Fail, "receiver.tls.plaintext", "refused on :0, which is not a loopback address (the receiver would stop) " +
			"set receiver.tls.cert, receiver.tls.key and receiver.tls.client_ca and remove receiver.tls.plaintext (README, \"Certificates\")", true},
		{"plaintext on loopback", "root", func(c *config.Receiver) { c.Receiver.TLS.Plaintext = true; c.Receiver.Listen = "127.0.0.1:0" }, Warn, "receiver.tls.plaintext",
			"senders are served without TLS on loopback 127.0.0.1:0", false},
		{"results directory missing", "root", func(c *config.Receiver) { c.Receiver.ResultsFile = filepath.Join(dir, "nodir", "r.jsonl") }, Fail, "receiver.results_file", "install -d", true},
		{"results directory not writable", "nobody", func(c *config.Receiver) { c.Receiver.ResultsFile = filepath.Join(rootOnly, "r.jsonl") }, Fail, "receiver.results_file", "not writable by user nobody", true},
		{"lost-packet file's directory missing", "root", func(c *config.Receiver) { c.Receiver.LostFile = filepath.Join(dir, "nodir", "lost.jsonl") }, Fail, "receiver.lost_file", "install -d", true},
		{"results outside the unit's state directory", "root", func(c *config.Receiver) { c.Receiver.ResultsFile = filepath.Join(dir, "r.jsonl") }, Warn, "receiver.results_file", "ReadWritePaths=", false},
		{"server certificate used as a client one", "root", func(c *config.Receiver) {
			c.Receiver.TLS.Cert, c.Receiver.TLS.Key = ca.issue("client", "x", x509.ExtKeyUsageClientAuth, time.Now().Add(time.Hour))
		}, Warn, "receiver.tls.cert", "does not chain", false},
		{"no senders listed", "root", func(c *config.Receiver) { c.Receiver.Senders = nil }, Warn, "receiver.senders", "first", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			r := Receiver(&c, Options{User: tc.user})
			if !has(r, tc.level, tc.key, tc.text) {
				t.Errorf("no %s line for %s saying %q:\n%s", tc.level, tc.key, tc.text, lines(r))
			}
			if r.Failed() != tc.failed {
				t.Errorf("failed = %v, want %v:\n%s", r.Failed(), tc.failed, lines(r))
			}
		})
	}
}

// TestInterface checks a real veth link in a network namespace of its
// own: missing, down, coalescing (GRO on), and clean.
func TestInterface(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"ip", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not found (apt-get install -y iproute2 ethtool)", tool)
		}
	}
	ns := fmt.Sprintf("ldspre-%d-%d", os.Getpid(), time.Now().UnixNano()%100000)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "-n", ns, "link", "add", "tap0", "type", "veth", "peer", "name", "peer0")
	run("ip", "-n", ns, "link", "set", "peer0", "up")
	for _, tc := range []struct {
		name   string
		setup  [][]string
		iface  string
		allow  bool
		level  Level
		text   string
		failed bool
	}{
		{"missing", nil, "eth9", false, Fail, "no such interface", true},
		{"down", [][]string{{"ip", "-n", ns, "link", "set", "tap0", "down"}}, "tap0", false, Warn, "ip link set tap0 up", false},
		{"coalescing", [][]string{{"ip", "-n", ns, "link", "set", "tap0", "up"}, {"ip", "netns", "exec", ns, "ethtool", "-K", "tap0", "gro", "on"}},
			"tap0", false, Fail, "ethtool -K tap0 gro off lro off", true},
		{"coalescing allowed", nil, "tap0", true, Warn, "allowed by capture.source.allow_coalescing", false},
		{"clean", [][]string{{"ip", "netns", "exec", ns, "ethtool", "-K", "tap0", "gro", "off"}}, "tap0", false, OK, "GRO/LRO off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range tc.setup {
				run(s...)
			}
			c := config.DefaultSender()
			c.Sketch.Seed = "3f1c9a7be2d4408c95e1d0b6a7f23c18"
			c.PTP.Enabled = false
			c.Metrics.Listen = ""
			c.Sender.TLS.Plaintext = true
			c.Capture.Source.Interface = tc.iface
			c.Capture.Source.AllowCoalescing = tc.allow
			var r *Report
			if err := testutil.InNetns(ns, func() error { r = Sender(&c, Options{User: "root"}); return nil }); err != nil {
				t.Fatal(err)
			}
			if !has(r, tc.level, "capture.source.interface", tc.text) {
				t.Errorf("no %s line for capture.source.interface saying %q:\n%s", tc.level, tc.text, lines(r))
			}
			if r.Failed() != tc.failed {
				t.Errorf("failed = %v, want %v:\n%s", r.Failed(), tc.failed, lines(r))
			}
		})
	}
}

// TestLogStartWarnings: a daemon about to start logs a guessable seed and
// a private key every user can read, naming the key and the file.
func TestLogStartWarnings(t *testing.T) {
	dir := t.TempDir()
	world, private := filepath.Join(dir, "world.key"), filepath.Join(dir, "private.key")
	for p, mode := range map[string]os.FileMode{world: 0o644, private: 0o640} {
		if err := os.WriteFile(p, []byte("k"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, seed, key string
		want, not       []string
	}{
		{"weak seed, world-readable key", "x", world, []string{"sketch.seed is weak: 1 characters", "key=sender.tls.key path=" + world, "mode=-rw-r--r--"}, nil},
		{"strong seed, private key", "3f1c9a7be2d4408c95e1d0b6a7f23c18", private, nil, []string{"WARN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			c := config.DefaultCommon()
			c.Sketch.Seed = tc.seed
			LogStartWarnings(slog.New(slog.NewTextHandler(&b, nil)), &c, map[string]string{"sender.tls.key": tc.key})
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("log lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tc.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("log has %q:\n%s", w, b.String())
				}
			}
		})
	}
}
