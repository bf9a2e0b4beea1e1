package export

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Config is the receiver's `export:` section (docs/operations.md, "Export").
// collectors, transport, brokers and topic are the contract keys; the rest
// are additions with defaults.
type Config struct {
	IPFIX IPFIXConfig `yaml:"ipfix"`
	Kafka KafkaConfig `yaml:"kafka"`
	// FlushTimeout bounds how long a stopping receiver waits for the
	// exporters to send what they hold.
	FlushTimeout time.Duration `yaml:"flush_timeout"`
}

// IPFIXConfig is `export.ipfix`: one exporting process per collector.
type IPFIXConfig struct {
	Collectors []string `yaml:"collectors"` // host:port of IPFIX collectors (RFC 7011)
	Transport  string   `yaml:"transport"`  // udp or tcp
	// EnterpriseNumber is the IANA Private Enterprise Number of the lds
	// enterprise-specific elements. The default, 32473, is the number RFC
	// 5612 reserves for documentation: set your organisation's own.
	EnterpriseNumber uint32 `yaml:"enterprise_number"`
	// MaxMessageBytes bounds each IPFIX message (UDP: keep it under the
	// path MTU minus 28 bytes of IP and UDP headers).
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// TemplateRefresh and TemplateRefreshMessages: over UDP the templates
	// are resent this often, and after this many messages of a domain
	// (RFC 7011 §8.4; 0 = no count-based refresh).
	TemplateRefresh         time.Duration `yaml:"template_refresh"`
	TemplateRefreshMessages int           `yaml:"template_refresh_messages"`
	// ObservationDomains maps sender ids to observation domain ids; a
	// sender not listed gets the FNV-1a 32-bit hash of its id.
	ObservationDomains map[string]uint32 `yaml:"observation_domains"`
	QueueRecords       int               `yaml:"queue_records"` // records buffered per collector before drops
	WriteTimeout       time.Duration     `yaml:"write_timeout"` // TCP: a write blocked this long fails the connection
	ReconnectMin       time.Duration     `yaml:"reconnect_min"` // TCP: backoff after a failed connection
	ReconnectMax       time.Duration     `yaml:"reconnect_max"`
}

// KafkaConfig is `export.kafka`.
type KafkaConfig struct {
	Brokers     []string      `yaml:"brokers"` // host:port seed brokers
	Topic       string        `yaml:"topic"`
	LostTopic   string        `yaml:"lost_topic"` // lost-packet records (LostPacket); "" = none
	ClientID    string        `yaml:"client_id"`
	Compression string        `yaml:"compression"` // zstd, lz4, snappy, gzip or none
	Linger      time.Duration `yaml:"linger"`      // how long a partition's batch waits to fill
	BatchBytes  int           `yaml:"batch_bytes"` // largest record batch
	// QueueRecords bounds the records buffered (lds's queue plus the
	// client's own buffer); beyond it records are dropped and counted.
	QueueRecords int       `yaml:"queue_records"`
	TLS          KafkaTLS  `yaml:"tls"`
	SASL         KafkaSASL `yaml:"sasl"`
}

// KafkaTLS configures TLS towards the brokers.
type KafkaTLS struct {
	Enabled    bool   `yaml:"enabled"`
	CA         string `yaml:"ca"`          // PEM; empty = system roots
	Cert       string `yaml:"cert"`        // client certificate (mTLS), optional
	Key        string `yaml:"key"`         //
	ServerName string `yaml:"server_name"` // empty = the broker's host
}

// KafkaSASL configures SASL authentication.
type KafkaSASL struct {
	Mechanism    string `yaml:"mechanism"` // "" (none), plain, scram-sha-256, scram-sha-512
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"` // file holding the password (kept out of the config)
}

// DefaultEnterpriseNumber is RFC 5612's documentation number.
const DefaultEnterpriseNumber = 32473

// DefaultConfig returns the defaults: no exporter.
func DefaultConfig() Config {
	return Config{
		FlushTimeout: 10 * time.Second,
		IPFIX: IPFIXConfig{Collectors: []string{}, Transport: "udp", EnterpriseNumber: DefaultEnterpriseNumber,
			MaxMessageBytes: 1400, TemplateRefresh: 30 * time.Second, TemplateRefreshMessages: 0,
			ObservationDomains: map[string]uint32{}, QueueRecords: 65536, WriteTimeout: 5 * time.Second,
			ReconnectMin: time.Second, ReconnectMax: 30 * time.Second},
		Kafka: KafkaConfig{Brokers: []string{}, Topic: "lds.flows", LostTopic: "lds.lost", ClientID: "lds-receiver", Compression: "zstd",
			Linger: 50 * time.Millisecond, BatchBytes: 1 << 20, QueueRecords: 262144},
	}
}

// Enabled reports whether any exporter is configured.
func (c *Config) Enabled() bool { return len(c.IPFIX.Collectors) > 0 || len(c.Kafka.Brokers) > 0 }

// Validate checks the section; every error names its key.
func (c *Config) Validate() error {
	var errs []error
	if c.FlushTimeout <= 0 {
		errs = append(errs, errors.New("export.flush_timeout: must be > 0"))
	}
	x := c.IPFIX
	for i, a := range x.Collectors {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("export.ipfix.collectors[%d]: %q is not host:port (e.g. 192.0.2.10:4739)", i, a))
		}
	}
	switch x.Transport {
	case "udp", "tcp":
	default:
		errs = append(errs, fmt.Errorf("export.ipfix.transport: %q is not one of udp, tcp", x.Transport))
	}
	if x.EnterpriseNumber == 0 {
		errs = append(errs, errors.New("export.ipfix.enterprise_number: must not be 0 (IANA's reserved number); use your organisation's PEN or the documentation number 32473"))
	}
	if x.MaxMessageBytes < 1024 || x.MaxMessageBytes > 65535 {
		errs = append(errs, errors.New("export.ipfix.max_message_bytes: must be in [1024, 65535] (the template set takes about 750 bytes; IPFIX's length field is 16 bits; keep UDP under the path MTU)"))
	}
	if x.TemplateRefresh <= 0 {
		errs = append(errs, errors.New("export.ipfix.template_refresh: must be > 0 (UDP collectors learn templates only from resends)"))
	}
	if x.TemplateRefreshMessages < 0 {
		errs = append(errs, errors.New("export.ipfix.template_refresh_messages: must be >= 0 (0 = time-based refresh only)"))
	}
	if x.QueueRecords < 1 {
		errs = append(errs, errors.New("export.ipfix.queue_records: must be >= 1"))
	}
	if x.WriteTimeout <= 0 {
		errs = append(errs, errors.New("export.ipfix.write_timeout: must be > 0"))
	}
	if x.ReconnectMin <= 0 || x.ReconnectMax < x.ReconnectMin {
		errs = append(errs, errors.New("export.ipfix.reconnect_min/reconnect_max: need 0 < reconnect_min <= reconnect_max"))
	}
	k := c.Kafka
	for i, b := range k.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("export.kafka.brokers[%d]: %q is not host:port (e.g. kafka-1:9092)", i, b))
		}
	}
	if len(k.Brokers) > 0 && k.Topic == "" {
		errs = append(errs, errors.New("export.kafka.topic: must not be empty when export.kafka.brokers is set"))
	}
	switch k.Compression {
	case "zstd", "lz4", "snappy", "gzip", "none":
	default:
		errs = append(errs, fmt.Errorf("export.kafka.compression: %q is not one of zstd, lz4, snappy, gzip, none", k.Compression))
	}
	if k.Linger < 0 {
		errs = append(errs, errors.New("export.kafka.linger: must be >= 0"))
	}
	if k.BatchBytes < 1024 {
		errs = append(errs, errors.New("export.kafka.batch_bytes: must be >= 1024"))
	}
	if k.QueueRecords < 1 {
		errs = append(errs, errors.New("export.kafka.queue_records: must be >= 1"))
	}
	if (k.TLS.Cert == "") != (k.TLS.Key == "") {
		errs = append(errs, errors.New("export.kafka.tls.cert/key: set both (client certificate) or neither"))
	}
	if !k.TLS.Enabled && (k.TLS.CA != "" || k.TLS.Cert != "") {
		errs = append(errs, errors.New("export.kafka.tls: ca/cert are set but enabled is false; set export.kafka.tls.enabled: true"))
	}
	switch k.SASL.Mechanism {
	case "":
	case "plain", "scram-sha-256", "scram-sha-512":
		if k.SASL.Username == "" || k.SASL.PasswordFile == "" {
			errs = append(errs, fmt.Errorf("export.kafka.sasl: mechanism %s needs username and password_file", k.SASL.Mechanism))
		}
	default:
		errs = append(errs, fmt.Errorf("export.kafka.sasl.mechanism: %q is not one of plain, scram-sha-256, scram-sha-512 (or empty)", k.SASL.Mechanism))
	}
	return errors.Join(errs...)
}
