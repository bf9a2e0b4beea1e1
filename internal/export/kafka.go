package export

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/results"
	exportv1 "github.com/lds-net/lds/proto/lds/export/v1"
)

// kafkaSink produces one protobuf FlowRecord per flow record to the topic,
// keyed by the flow's 5-tuple, through franz-go's idempotent producer
// (batching, compression, retries while the record is buffered).
type kafkaSink struct {
	cfg      KafkaConfig
	brokers  string
	q        *queue
	m        Metrics
	log      *slog.Logger
	t        int64
	cl       *kgo.Client
	stopping atomic.Bool
	// pending counts records handed to the client whose promise has not
	// run: a stop waits for all of them, so that every record is counted
	// sent or dropped before Run returns.
	pending sync.WaitGroup

	mu    sync.Mutex // guards state: promises run on the client's goroutines
	state stateLog
}

func newKafkaSink(cfg KafkaConfig, intervalNS int64, m Metrics, log *slog.Logger) (*kafkaSink, error) {
	s := &kafkaSink{cfg: cfg, brokers: strings.Join(cfg.Brokers, ","), m: m, log: log, t: intervalNS}
	s.state = stateLog{kind: KindKafka, name: s.brokers, log: log, m: m}
	// The queue and the client's buffer share queue_records.
	ours := max(1, cfg.QueueRecords/2)
	s.q = newQueue(ours)
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.ClientID(cfg.ClientID),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchMaxBytes(int32(cfg.BatchBytes)),
		kgo.MaxBufferedRecords(max(1, cfg.QueueRecords-ours)),
		kgo.WithHooks(connHook{s}),
	}
	switch cfg.Compression {
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	default:
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	}
	if cfg.TLS.Enabled {
		tc, err := kafkaTLS(cfg.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if cfg.SASL.Mechanism != "" {
		b, err := os.ReadFile(cfg.SASL.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("sasl.password_file: %w", err)
		}
		pass := strings.TrimRight(string(b), "\r\n")
		switch cfg.SASL.Mechanism {
		case "plain":
			opts = append(opts, kgo.SASL(plain.Auth{User: cfg.SASL.Username, Pass: pass}.AsMechanism()))
		case "scram-sha-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASL.Username, Pass: pass}.AsSha256Mechanism()))
		case "scram-sha-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASL.Username, Pass: pass}.AsSha512Mechanism()))
		}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	s.cl = cl
	return s, nil
}

func kafkaTLS(c KafkaTLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return nil, fmt.Errorf("tls.ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca: %s holds no PEM certificate", c.CA)
		}
		tc.RootCAs = pool
	}
	if c.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("tls.cert/key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (s *kafkaSink) kind() string  { return KindKafka }
func (s *kafkaSink) name() string  { return s.brokers }
func (s *kafkaSink) queue() *queue { return s.q }

func (s *kafkaSink) run(ctx context.Context, flushBy func() time.Time) {
	// The client's own context (producer id, buffered records, waits for
	// buffer room) outlives ctx until the flush deadline: a stop flushes.
	pctx, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	stopTimer := context.AfterFunc(ctx, func() { time.AfterFunc(time.Until(flushBy()), pcancel) })
	defer stopTimer()
	for {
		b, ok := s.q.take(ctx)
		if !ok {
			break
		}
		s.produce(pctx, b)
	}
	for { // stopping: the rest, within the flush deadline
		b, ok := s.q.tryTake()
		if !ok {
			break
		}
		s.produce(pctx, b)
	}
	if err := s.cl.Flush(pctx); err != nil {
		s.log.Warn("export: Kafka flush at stop did not finish; the records still buffered are dropped", "brokers", s.brokers,
			"buffered", s.cl.BufferedProduceRecords(), "err", err)
	}
	s.stopping.Store(true)
	s.cl.Close() // fails what is still buffered: counted as dropped (stop)
	s.pending.Wait()
	s.m.ExportQueued(KindKafka, s.brokers, 0)
}

// produce hands a batch to the client, waiting (in this goroutine, never
// the publisher's) while the client's buffer is full.
func (s *kafkaSink) produce(ctx context.Context, b batch) {
	s.produceLost(ctx, b) // lost.go
	for i := range b.flows {
		r := &b.flows[i]
		val, err := proto.Marshal(ToProto(r, s.t))
		if err != nil {
			s.m.ExportDropped(KindKafka, s.brokers, DropEncode, 1)
			continue
		}
		rec := &kgo.Record{Key: FlowKey(r), Value: val}
		if ctx.Err() != nil {
			s.m.ExportDropped(KindKafka, s.brokers, DropStop, 1)
			continue
		}
		s.pending.Add(1)
		s.cl.Produce(ctx, rec, s.promise)
	}
	s.m.ExportQueued(KindKafka, s.brokers, s.q.len()+int(s.cl.BufferedProduceRecords()))
}

func (s *kafkaSink) promise(_ *kgo.Record, err error) {
	defer s.pending.Done()
	if err == nil {
		s.m.ExportSent(KindKafka, s.brokers, 1)
		s.mu.Lock()
		s.state.ok()
		s.mu.Unlock()
		return
	}
	reason := DropSendError
	if s.stopping.Load() || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		reason = DropStop
	}
	s.m.ExportDropped(KindKafka, s.brokers, reason, 1)
	s.mu.Lock()
	s.state.fail(err)
	s.mu.Unlock()
}

// connHook turns failed broker connections into errors and a down state
// (the client keeps the records and retries; nothing is dropped yet).
type connHook struct{ s *kafkaSink }

func (h connHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil || h.s.stopping.Load() {
		return
	}
	h.s.mu.Lock()
	h.s.state.fail(fmt.Errorf("connecting to a broker: %w", err))
	h.s.mu.Unlock()
}

// FlowKey is the Kafka message key of a record: src and dst as 16 bytes
// each (IPv4 mapped into IPv6), protocol, source and destination port.
func FlowKey(r *results.FlowRecord) []byte {
	k := make([]byte, 0, 37)
	for _, a := range [...]netip.Addr{r.Key.SrcAddr(), r.Key.DstAddr()} {
		b := a.As16() // an IPv4 address in its IPv4-mapped form
		k = append(k, b[:]...)
	}
	k = append(k, r.Key.Proto)
	k = binary.BigEndian.AppendUint16(k, r.Key.SPort)
	return binary.BigEndian.AppendUint16(k, r.Key.DPort)
}

// ToProto converts a record to its Kafka message (t: interval length, ns).
func ToProto(r *results.FlowRecord, t int64) *exportv1.FlowRecord {
	p50, p90, p99, n := quantiles(r)
	return &exportv1.FlowRecord{
		Interval: r.Interval, StartNs: r.StartNS, EndNs: r.StartNS + t, Sender: r.Sender,
		Src: r.Key.SrcAddr().String(), Dst: r.Key.DstAddr().String(), Sport: uint32(r.Key.SPort), Dport: uint32(r.Key.DPort), Proto: uint32(r.Key.Proto),
		Packets: r.Packets, Loss: r.Loss, Samples: r.Samples,
		DelayNs: r.DelayNS, StddevNs: r.StddevNS, Ci95Ns: r.CI95NS,
		P50Ns: results.Float(p50), P90Ns: results.Float(p90), P99Ns: results.Float(p99), DelaySamples: n,
		Status: string(r.Status), Estimator: r.Estimator, Partial: r.Partial, ClockUnsynced: r.Unsynced,
		ClockErrorBoundNs: r.ErrorNS, Spike: r.Spike, LossPoint: r.LossPoint, Bytes: r.Bytes,
		LossBound: r.LossBound, DelayFrom: r.DelayFrom, LossSpike: r.LossSpike, LossExact: r.LossExact,
	}
}
