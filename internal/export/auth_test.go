package export_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lds-net/lds/internal/export"
)

// produceThrough sends one interval through a Kafka exporter configured by
// configure and reports what it counted.
func produceThrough(t *testing.T, c *kfake.Cluster, configure func(*export.KafkaConfig)) *countMetrics {
	t.Helper()
	cfg := export.DefaultConfig()
	cfg.Kafka.Brokers = c.ListenAddrs()
	cfg.FlushTimeout = 2 * time.Second
	configure(&cfg.Kafka)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := &countMetrics{}
	set, err := export.New(cfg, export.Options{IntervalNS: 1e9}, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); set.Run(ctx) }()
	set.Publish(flows(1, 20))
	stop()
	<-done
	return m
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKafkaSASL: the export.kafka.sasl keys authenticate with PLAIN and
// SCRAM; a wrong password delivers nothing and is counted.
func TestKafkaSASL(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ mech, kfakeMech string }{
		{"plain", "PLAIN"}, {"scram-sha-256", "SCRAM-SHA-256"}, {"scram-sha-512", "SCRAM-SHA-512"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			c := kafkaCluster(t, kfake.EnableSASL(), kfake.Superuser(tc.kfakeMech, "lds", "s3cret"))
			ok := writeFile(t, dir, tc.mech+".ok", "s3cret\n")
			m := produceThrough(t, c, func(k *export.KafkaConfig) {
				k.SASL = export.KafkaSASL{Mechanism: tc.mech, Username: "lds", PasswordFile: ok}
			})
			if m.sent.Load() != 20 {
				t.Errorf("sent %d of 20 with the right password (dropped %d)", m.sent.Load(), m.droppedTotal())
			}
			bad := writeFile(t, dir, tc.mech+".bad", "wrong\n")
			m = produceThrough(t, c, func(k *export.KafkaConfig) {
				k.SASL = export.KafkaSASL{Mechanism: tc.mech, Username: "lds", PasswordFile: bad}
			})
			if m.sent.Load() != 0 || m.droppedTotal() != 20 || m.errors.Load() == 0 {
				t.Errorf("wrong password: sent %d, dropped %d, errors %d; want 0, 20, > 0", m.sent.Load(), m.droppedTotal(), m.errors.Load())
			}
		})
	}
}

// TestKafkaTLS: export.kafka.tls with the broker's CA delivers; without
// it (system roots) the broker is not trusted and nothing is delivered.
func TestKafkaTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM, serverCert := selfSigned(t)
	c := kafkaCluster(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}))
	ca := writeFile(t, dir, "ca.pem", caPEM)
	m := produceThrough(t, c, func(k *export.KafkaConfig) {
		k.TLS = export.KafkaTLS{Enabled: true, CA: ca, ServerName: "kafka.test"}
	})
	if m.sent.Load() != 20 {
		t.Errorf("sent %d of 20 over TLS (dropped %d)", m.sent.Load(), m.droppedTotal())
	}
	m = produceThrough(t, c, func(k *export.KafkaConfig) {
		k.TLS = export.KafkaTLS{Enabled: true, ServerName: "kafka.test"}
	})
	if m.sent.Load() != 0 || m.errors.Load() == 0 {
		t.Errorf("untrusted broker: sent %d, errors %d; want 0, > 0", m.sent.Load(), m.errors.Load())
	}
}

// selfSigned returns a CA-less self-signed certificate for kafka.test.
func selfSigned(t *testing.T) (string, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kafka.test"},
		DNSNames: []string{"kafka.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	cert, err := tls.X509KeyPair([]byte(certPEM), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, cert
}

// TestConfigValidate: every wrong key is refused with its name.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		key string
		set func(*export.Config)
	}{
		{"export.ipfix.collectors[0]", func(c *export.Config) { c.IPFIX.Collectors = []string{"no-port"} }},
		{"export.ipfix.transport", func(c *export.Config) { c.IPFIX.Transport = "sctp" }},
		{"export.ipfix.enterprise_number", func(c *export.Config) { c.IPFIX.EnterpriseNumber = 0 }},
		{"export.ipfix.max_message_bytes", func(c *export.Config) { c.IPFIX.MaxMessageBytes = 512 }},
		{"export.ipfix.template_refresh", func(c *export.Config) { c.IPFIX.TemplateRefresh = 0 }},
		{"export.ipfix.template_refresh_messages", func(c *export.Config) { c.IPFIX.TemplateRefreshMessages = -1 }},
		{"export.ipfix.queue_records", func(c *export.Config) { c.IPFIX.QueueRecords = 0 }},
		{"export.ipfix.write_timeout", func(c *export.Config) { c.IPFIX.WriteTimeout = 0 }},
		{"export.ipfix.reconnect_min", func(c *export.Config) { c.IPFIX.ReconnectMax = time.Millisecond }},
		{"export.kafka.brokers[0]", func(c *export.Config) { c.Kafka.Brokers = []string{"kafka"} }},
		{"export.kafka.topic", func(c *export.Config) { c.Kafka.Brokers, c.Kafka.Topic = []string{"k:9092"}, "" }},
		{"export.kafka.compression", func(c *export.Config) { c.Kafka.Compression = "brotli" }},
		{"export.kafka.batch_bytes", func(c *export.Config) { c.Kafka.BatchBytes = 10 }},
		{"export.kafka.queue_records", func(c *export.Config) { c.Kafka.QueueRecords = 0 }},
		{"export.kafka.tls.cert", func(c *export.Config) { c.Kafka.TLS = export.KafkaTLS{Enabled: true, Cert: "c.pem"} }},
		{"export.kafka.tls", func(c *export.Config) { c.Kafka.TLS = export.KafkaTLS{CA: "ca.pem"} }},
		{"export.kafka.sasl", func(c *export.Config) { c.Kafka.SASL = export.KafkaSASL{Mechanism: "plain"} }},
		{"export.kafka.sasl.mechanism", func(c *export.Config) { c.Kafka.SASL = export.KafkaSASL{Mechanism: "gssapi"} }},
		{"export.flush_timeout", func(c *export.Config) { c.FlushTimeout = 0 }},
	} {
		t.Run(tc.key, func(t *testing.T) {
			c := export.DefaultConfig()
			if err := c.Validate(); err != nil {
				t.Fatalf("defaults refused: %v", err)
			}
			tc.set(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error %v does not name %s", err, tc.key)
			}
		})
	}
}
