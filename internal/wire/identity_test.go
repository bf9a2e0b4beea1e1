package wire

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// issueNamed writes a client certificate with subject CN cn and DNS SANs.
func (ca *testCA) issueNamed(t *testing.T, dir, cn string, dns ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: newSerial(t), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ReplaceAll(cn+"-"+strings.Join(dns, "-"), "/", "_")
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

// mtlsServer serves h over mTLS on a loopback port with the given allowed
// senders, and returns its address and a function making client credentials.
func mtlsServer(t *testing.T, senders map[string]bool, h Handler) (string, *testCA, string) {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, dir, "lds")
	srvCert, srvKey := ca.issue(t, dir, "receiver", true)
	creds, err := ServerTLS(srvCert, srvKey, ca.file)
	if err != nil {
		t.Fatal(err)
	}
	cfg := serverConfig()
	cfg.Senders = senders
	addr, _ := startServer(t, nil, cfg, h, creds, 1<<20)
	return addr, ca, dir
}

func clientCreds(t *testing.T, ca *testCA, cert, key string) credentials.TransportCredentials {
	t.Helper()
	c, err := ClientTLS(cert, key, ca.file, "lds-receiver")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCertificateBindsSenderID: over real mTLS, a sender id must be its
// certificate's CN or one of its DNS SANs, with an allow-list and with the
// wildcard (senders: []) alike. A refused id gets PermissionDenied naming
// the id and the certificate's names, and never reaches the handler or a
// metric label.
func TestCertificateBindsSenderID(t *testing.T) {
	for _, tc := range []struct {
		name    string
		senders map[string]bool
	}{
		{"allow-list", map[string]bool{"edge-a": true, "edge-b": true, "edge-c": true}},
		{"wildcard", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRecHandler()
			addr, ca, dir := mtlsServer(t, tc.senders, h)
			bCert, bKey := ca.issueNamed(t, dir, "edge-b")
			aCert, aKey := ca.issueNamed(t, dir, "edge-a")
			cCert, cKey := ca.issueNamed(t, dir, "tap-host-17", "edge-c", "edge-c.example")
			// Names that only resemble a listed id: another case, a longer name.
			xCert, xKey := ca.issueNamed(t, dir, "EDGE-A", "edge-b.x", "edge-c2")
			for _, c := range []struct {
				cert, key, id string
				ok            bool
				cn            string // the certificate's CN, which a refusal names
			}{
				{bCert, bKey, "edge-a", false, "edge-b"},            // edge-b's certificate cannot speak as edge-a
				{aCert, aKey, "edge-a", true, "edge-a"},             // CN
				{cCert, cKey, "edge-c", true, "tap-host-17"},        // DNS SAN
				{cCert, cKey, "tap-host-17", tc.senders == nil, ""}, // CN, listed only under the wildcard
				{aCert, aKey, "edge-b", false, "edge-a"},            //
				{xCert, xKey, "edge-a", false, "EDGE-A"},            // CN in another case
				{xCert, xKey, "edge-b", false, "EDGE-A"},            // a DNS SAN the id is a prefix of
				{xCert, xKey, "edge-c", false, "EDGE-A"},            // a DNS SAN one character longer
			} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				before := h.connects()
				st := rawStream(t, ctx, addr, clientCreds(t, ca, c.cert, c.key))
				err := st.Send(hello(c.id, serverConfig().Fingerprint))
				if err == nil {
					r, rerr := st.Recv()
					if rerr == nil && r.GetHelloAck() != nil {
						err = nil
					} else {
						err = rerr
					}
				}
				cancel()
				if c.ok {
					if err != nil || h.connects() != before+1 {
						t.Errorf("id %s with certificate %s: refused (%v)", c.id, filepath.Base(c.cert), err)
					}
					continue
				}
				s, _ := status.FromError(err)
				if c.id == "tap-host-17" { // its certificate names it, the allow-list does not
					if s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), "receiver.senders") {
						t.Errorf("unlisted id: %v, want PermissionDenied naming receiver.senders", err)
					}
					continue
				}
				if s.Code() != codes.PermissionDenied || !strings.Contains(s.Message(), `"`+c.id+`"`) ||
					!strings.Contains(s.Message(), "CN") || h.connects() != before {
					t.Errorf("id %s with certificate %s: %v, want PermissionDenied naming the id and the certificate's names", c.id, filepath.Base(c.cert), err)
				}
				if !strings.Contains(s.Message(), `"`+c.cn+`"`) {
					t.Errorf("refusal %q does not name the certificate's CN %s", s.Message(), c.cn)
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for i, r := range h.frameErrs {
				if r == "identity_mismatch" && h.errSenders[i] != "" {
					t.Errorf("a refused claim created a metric label sender=%q", h.errSenders[i])
				}
			}
			if !slices.Contains(h.frameErrs, "identity_mismatch") {
				t.Errorf("frame errors %v, want identity_mismatch counted", h.frameErrs)
			}
		})
	}
}

// TestIdentityMatchesExactly: a sender id is one of its certificate's
// names byte for byte. A name in another case, a DNS SAN that begins with
// the id (edge-a.x is not edge-a) or one the id begins with, and a CN
// longer or shorter than the id are all refused. (An empty id never gets
// here: checkHello refuses it first.)
func TestIdentityMatchesExactly(t *testing.T) {
	cert := func(cn string, dns ...string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}
	}
	for _, c := range []struct {
		name string
		cert *x509.Certificate
		id   string
		ok   bool
	}{
		{"CN", cert("edge-a"), "edge-a", true},
		{"DNS SAN", cert("host-1", "edge-a", "edge-a.example"), "edge-a", true},
		{"longer DNS SAN", cert("host-1", "edge-a.example"), "edge-a.example", true},
		{"CN upper case", cert("EDGE-A"), "edge-a", false},
		{"id upper case", cert("edge-a"), "Edge-A", false},
		{"DNS SAN upper case", cert("host-1", "EDGE-A"), "edge-a", false},
		{"id upper case, DNS SAN", cert("host-1", "edge-a"), "EDGE-A", false},
		{"DNS SAN with the id as prefix", cert("host-1", "edge-a.x"), "edge-a", false},
		{"DNS SAN one character longer", cert("host-1", "edge-a2"), "edge-a", false},
		{"id longer than the DNS SAN", cert("host-1", "edge-a"), "edge-a.x", false},
		{"CN with the id as prefix", cert("edge-a.x"), "edge-a", false},
		{"id longer than the CN", cert("edge-a"), "edge-a2", false},
		{"empty id", cert("edge-a", "edge-b"), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkIdentity(c.cert, c.id)
			if c.ok != (err == nil) {
				t.Fatalf("id %q, CN %q, DNS SANs %q: %v, want accepted %v", c.id, c.cert.Subject.CommonName, c.cert.DNSNames, err, c.ok)
			}
			if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", c.id)) {
				t.Errorf("refusal %q does not name the id %q", err, c.id)
			}
		})
	}
}

// TestReconnectReplacesStaleStream: edge-a's stream goes stale (its peer
// silent, the connection open); edge-a reconnecting on a new connection
// replaces it instead of being locked out ("already connected"), and the
// stale stream ends with Aborted. An impostor (edge-b's certificate
// claiming edge-a) cannot replace it.
func TestReconnectReplacesStaleStream(t *testing.T) {
	h := newRecHandler()
	h.exclusive = true
	addr, ca, dir := mtlsServer(t, map[string]bool{"edge-a": true, "edge-b": true}, h)
	aCert, aKey := ca.issueNamed(t, dir, "edge-a")
	bCert, bKey := ca.issueNamed(t, dir, "edge-b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	stale := rawStream(t, ctx, addr, clientCreds(t, ca, aCert, aKey))
	if err := stale.Send(hello("edge-a", serverConfig().Fingerprint)); err != nil {
		t.Fatal(err)
	}
	if f, err := stale.Recv(); err != nil || f.GetHelloAck() == nil {
		t.Fatalf("first edge-a stream: %v", err)
	}
	// The impostor is refused and leaves the stale stream alone.
	imp := rawStream(t, ctx, addr, clientCreds(t, ca, bCert, bKey))
	if err := imp.Send(hello("edge-a", serverConfig().Fingerprint)); err != nil {
		t.Fatal(err)
	}
	if _, err := recvUntilErr(imp); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("impostor: %v, want PermissionDenied", err)
	}
	// edge-a again, with the sender's own client on a new connection.
	cfg := clientConfig(addr, "edge-a")
	cfg.Creds = clientCreds(t, ca, aCert, aKey)
	c, err := NewClient(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	done := runClient(ctx, c)
	if err := c.Submit(makeInterval(t, testParams(), 42, 100, 42), testMeta()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := waitErr(t, done, 15*time.Second); err != nil {
		t.Fatalf("edge-a's reconnect: %v", err)
	}
	if got := h.ids("edge-a"); !slices.Equal(got, []int64{42}) {
		t.Errorf("intervals of the new stream: %v, want [42]", got)
	}
	_, err = recvUntilErr(stale)
	if s, _ := status.FromError(err); s.Code() != codes.Aborted || !strings.Contains(s.Message(), "replaced") {
		t.Errorf("stale stream ended with %v, want Aborted saying it was replaced", err)
	}
}

// TestHelloDeadline: a connection that opens a stream and never sends
// Hello is ended with DeadlineExceeded after HelloTimeout, counted without
// a sender label.
func TestHelloDeadline(t *testing.T) {
	h := newRecHandler()
	cfg := serverConfig()
	cfg.HelloTimeout = 200 * time.Millisecond
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startServer(t, lis, cfg, h, nil, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := rawStream(t, ctx, addr, nil)
	_, err = recvUntilErr(st)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no Hello") {
		t.Errorf("silent stream ended with %v, want DeadlineExceeded naming the missing Hello", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(h.frameErrs, []string{"hello_timeout"}) || h.errSenders[0] != "" {
		t.Errorf("frame errors %v (senders %q), want one unlabelled hello_timeout", h.frameErrs, h.errSenders)
	}
}

// TestConnectionCap: with a cap of one (plaintext, so authenticated at
// once) connection, a second sender's stream is not served while the
// first connection is open (its connection is refused at the cap, twice:
// the first attempt and a retry), and is served once it closes.
func TestConnectionCap(t *testing.T) {
	h := newRecHandler()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	atCap := make(chan struct{}, 16)
	g := NewGate(GateConfig{MaxAuthenticated: 1, Refusals: &Refusals{Connection: func(reason string) {
		if reason == RefusedMaxConnections {
			select {
			case atCap <- struct{}{}:
			default:
			}
		}
	}}})
	gl, err := g.Listener(lis)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startServer(t, gl, serverConfig(), h, g.Creds(nil), 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := rawStream(t, ctx, addr, nil)
	if f, err := first.Recv(); err != nil || f.GetChallenge() == nil {
		t.Fatalf("first connection: %v", err)
	}
	// The second connection is refused at the cap and retries: its
	// Challenge cannot come while the first connection is open.
	c2, err := NewClient(clientConfig(addr, "s2"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	done := runClient(ctx, c2)
	if err := c2.Submit(makeInterval(t, testParams(), 3, 50, 3), testMeta()); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	// A broken cap serves the second sender instead: no refusal comes,
	// and the client ends (done) or the deadline passes first.
	for range 2 {
		select {
		case <-atCap:
		case err := <-done:
			t.Fatalf("second sender ended (%v) before being refused twice at the cap; %d senders connected", err, h.connects())
		case <-ctx.Done():
			t.Fatalf("second connection never refused at the cap; %d senders connected", h.connects())
		}
	}
	if n := h.connects(); n != 0 {
		t.Fatalf("%d senders connected while the only connection slot was taken", n)
	}
	if err := first.CloseSend(); err != nil {
		t.Fatal(err)
	}
	first.conn.Close()
	if err := waitErr(t, done, 30*time.Second); err != nil {
		t.Fatalf("second sender after the first closed: %v", err)
	}
	if got := h.ids("s2"); !slices.Equal(got, []int64{3}) {
		t.Errorf("second sender's intervals %v, want [3]", got)
	}
}

// TestSeedProofBoundToTheStream: a Hello without a seed proof (an older
// sender) is refused as incompatible; a proof made for another stream's
// challenge (a replayed Hello) is refused as a differing seed.
func TestSeedProofBoundToTheStream(t *testing.T) {
	h := newRecHandler()
	cfg := serverConfig()
	cfg.Seed = "3f1c0a9be47d25c8a1f6d0e2b9c47a15"
	addr, _ := startServer(t, nil, cfg, h, nil, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	st := rawStream(t, ctx, addr, nil)
	old := hello("s1", cfg.Fingerprint)
	old.GetHello().SeedProof = []byte{} // sent as absent
	if err := st.Send(old); err != nil {
		t.Fatal(err)
	}
	_, err := recvUntilErr(st)
	if s, _ := status.FromError(err); s.Code() != codes.FailedPrecondition || !strings.Contains(s.Message(), "no seed proof") ||
		!strings.Contains(s.Message(), "run the same lds version") {
		t.Errorf("Hello without a proof: %v, want FailedPrecondition naming the missing proof and the remedy", err)
	}

	// A proof valid for the seed, made for a challenge this stream did not send.
	st = rawStream(t, ctx, addr, nil)
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	nonce := newNonce()
	replayed := hello("s1", cfg.Fingerprint)
	replayed.GetHello().Nonce = nonce
	replayed.GetHello().SeedProof = SeedProof(cfg.Seed, newNonce(), nonce, "s1")
	if err := st.SketchExchange_StreamClient.Send(replayed); err != nil {
		t.Fatal(err)
	}
	_, err = recvUntilErr(st)
	if s, _ := status.FromError(err); s.Code() != codes.FailedPrecondition || !strings.Contains(s.Message(), "in: sketch.seed (") {
		t.Errorf("replayed proof: %v, want FailedPrecondition naming sketch.seed", err)
	}
	if n := h.connects(); n != 0 {
		t.Errorf("%d refused senders reached the handler", n)
	}
}
