package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ReceiverServerName is the DNS name in the receiver's certificate; the
// sender checks it (sender.tls.server_name).
const ReceiverServerName = "lds-receiver.testbed"

// PKI is the files of a throw-away CA, a receiver (server) certificate
// and a sender (client) certificate, as users deploy lds (mTLS).
type PKI struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewPKI writes the PEM files into dir. The receiver's certificate names
// ReceiverServerName and serverIP; both certificates live one day.
func NewPKI(dir string, serverIP net.IP) (*PKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testbed: CA key: %w", err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lds testbed CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testbed: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &PKI{CA: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "receiver.pem"), ServerKey: filepath.Join(dir, "receiver-key.pem"),
		ClientCert: filepath.Join(dir, "sender.pem"), ClientKey: filepath.Join(dir, "sender-key.pem")}
	if err := writePEM(p.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames: dns, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("testbed: certificate %s: %w", cn, err)
		}
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyPath, "PRIVATE KEY", kb)
	}
	if err := leaf(2, ReceiverServerName, x509.ExtKeyUsageServerAuth, []string{ReceiverServerName}, []net.IP{serverIP}, p.ServerCert, p.ServerKey); err != nil {
		return nil, err
	}
	// The receiver binds sender.id to a name of the client certificate.
	if err := leaf(3, "lds-sender.testbed", x509.ExtKeyUsageClientAuth, []string{senderID}, nil, p.ClientCert, p.ClientKey); err != nil {
		return nil, err
	}
	return p, nil
}

func writePEM(path, typ string, der []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		f.Close()
		return fmt.Errorf("testbed: write %s: %w", path, err)
	}
	return f.Close()
}
