package wire

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// testCA is a throwaway certificate authority (ECDSA P-256, valid one hour).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM of the CA certificate
}

func newSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: newSerial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a leaf certificate and key signed by ca; server certificates
// name 127.0.0.1 and "lds-receiver".
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: newSerial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"lds-receiver"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMTLS: a sender with a certificate from the receiver's client CA is
// served; one without a certificate, with one from another CA, or that
// does not trust the receiver's CA is refused before any Hello is read.
func TestMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "lds")
	other := newTestCA(t, dir, "other")
	srvCert, srvKey := ca.issue(t, dir, "receiver", true)
	goodCert, goodKey := ca.issue(t, dir, "s1", false) // the certificate names sender s1
	s2Cert, s2Key := ca.issue(t, dir, "s2", false)
	badCert, badKey := other.issue(t, dir, "sender-other-ca", false)

	creds, err := ServerTLS(srvCert, srvKey, ca.file)
	if err != nil {
		t.Fatal(err)
	}
	h := newRecHandler()
	addr, _ := startServer(t, nil, serverConfig(), h, creds, 1<<20)

	clientTLS := func(t *testing.T, cert, key, caFile string) credentials.TransportCredentials {
		t.Helper()
		c, err := ClientTLS(cert, key, caFile, "lds-receiver")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	noCert := func(t *testing.T) credentials.TransportCredentials {
		t.Helper()
		pool := x509.NewCertPool()
		pool.AddCert(ca.cert)
		return credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "lds-receiver", MinVersion: tls.VersionTLS13})
	}
	tests := []struct {
		name  string
		creds func(t *testing.T) credentials.TransportCredentials
		ok    bool
	}{
		{"certificate from the client CA", func(t *testing.T) credentials.TransportCredentials {
			return clientTLS(t, goodCert, goodKey, ca.file)
		}, true},
		{"no client certificate", noCert, false},
		{"certificate from another CA", func(t *testing.T) credentials.TransportCredentials {
			return clientTLS(t, badCert, badKey, ca.file)
		}, false},
		{"sender does not trust the receiver", func(t *testing.T) credentials.TransportCredentials {
			return clientTLS(t, goodCert, goodKey, other.file)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := h.connects()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tc.creds(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// The first error of opening the stream, sending Hello, reading HelloAck.
			var f *ldsv1.ReceiverFrame
			raw, err := ldsv1.NewSketchExchangeClient(conn).Stream(ctx)
			if err == nil {
				st := &testStream{SketchExchange_StreamClient: raw}
				if err = st.Send(hello("s1", serverConfig().Fingerprint)); err == nil || errors.Is(err, io.EOF) {
					f, err = st.Recv()
				}
			}
			if tc.ok {
				if err != nil || f.GetHelloAck() == nil {
					t.Fatalf("refused: %v", err)
				}
				if h.connects() != before+1 {
					t.Errorf("handler did not see the connection")
				}
				return
			}
			if err == nil {
				t.Fatalf("served a sender that should be refused (got %v)", f)
			}
			// What the sender sees depends on timing (TLS 1.3 sends the
			// server's alert after the client's handshake is done): either
			// the alert ("certificate required") or a broken pipe.
			t.Logf("refused as expected: %v", err)
			if h.connects() != before {
				t.Errorf("handler saw a connection from a refused sender")
			}
		})
	}

	// The sender's own client, end to end over mTLS.
	cfg := clientConfig(addr, "s2")
	cfg.Creds = clientTLS(t, s2Cert, s2Key, ca.file)
	c, err := NewClient(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := runClient(ctx, c)
	if err := c.Submit(makeInterval(t, testParams(), 9, 100, 9), testMeta()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := waitErr(t, done, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := h.ids("s2"); len(got) != 1 || got[0] != 9 {
		t.Errorf("over mTLS the receiver got %v, want [9]", got)
	}
}

func TestTLSFilesRefused(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := newTestCA(t, dir, "lds")
	cert, key := ca.issue(t, dir, "receiver", true)
	if _, err := ServerTLS(cert, key, empty); err == nil || !strings.Contains(err.Error(), "receiver.tls.client_ca") {
		t.Errorf("ServerTLS with a CA file holding no PEM: %v", err)
	}
	if _, err := ServerTLS(filepath.Join(dir, "missing.pem"), key, ca.file); err == nil || !strings.Contains(err.Error(), "receiver.tls.cert/key") {
		t.Errorf("ServerTLS with a missing cert: %v", err)
	}
	if _, err := ClientTLS(cert, key, empty, "x"); err == nil || !strings.Contains(err.Error(), "sender.tls.ca") {
		t.Errorf("ClientTLS with a CA file holding no PEM: %v", err)
	}
}
