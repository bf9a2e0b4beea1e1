package export_test

import (
	"context"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/export"
)

// deadTCPPeer accepts connections and never reads from them.
func deadTCPPeer(t *testing.T) string {
	t.Helper()
	addr, closer := deadTCPPeerCloser(t)
	t.Cleanup(closer)
	return addr
}

// deadTCPPeerCloser is deadTCPPeer with a function that closes it (and the
// connections it holds); it may be called more than once.
func deadTCPPeerCloser(t *testing.T) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never read
		}
	}()
	var once sync.Once
	closer := func() {
		once.Do(func() {
			lis.Close()
			<-done
			for _, c := range conns {
				c.Close()
			}
		})
	}
	t.Cleanup(closer)
	return lis.Addr().String(), closer
}

// deadUDPPort is a loopback UDP port nobody listens on (writes draw ICMP
// port unreachable).
func deadUDPPort(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	return addr
}

// stalledKafka is a broker that takes produce requests and never answers
// them until the test ends.
func stalledKafka(t *testing.T) *kfake.Cluster {
	t.Helper()
	c := kafkaCluster(t)
	release := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	t.Cleanup(func() { close(release) })
	return c
}

// TestPublishNeverBlocks: an IPFIX collector over TCP that stops reading
// blocks its exporter's write; Publish still returns for every interval,
// the drops are counted, and once the collector goes away every record is
// accounted for: sent or dropped, none silently lost.
func TestPublishNeverBlocks(t *testing.T) {
	peer, closePeer := deadTCPPeerCloser(t)
	cfg := export.DefaultConfig()
	cfg.IPFIX.Collectors, cfg.IPFIX.Transport = []string{peer}, "tcp"
	cfg.IPFIX.QueueRecords = 1000
	cfg.IPFIX.MaxMessageBytes = 65535
	cfg.IPFIX.WriteTimeout = time.Hour // the write stays blocked until the peer goes
	cfg.FlushTimeout = 100 * time.Millisecond
	m := &countMetrics{}
	set, err := export.New(cfg, export.Options{IntervalNS: 1e9}, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); set.Run(ctx) }()
	published, still := 0, 0
	// Publish until the exporter is stuck in its write: something was
	// written, the queue is full and drops are counted, and the sent count
	// stays put over 20 publishes.
	for iv := int64(1); still < 20; iv++ {
		before := m.sent.Load()
		set.Publish(flows(iv, 1000)) // must return: a hang here fails the test
		published += 1000
		if before > 0 && m.sent.Load() == before && m.dropped[0].Load() > 0 && m.queued.Load() == int64(cfg.IPFIX.QueueRecords) {
			still++
		} else {
			still = 0
		}
		if iv > 5000 {
			t.Fatalf("the exporter never blocked: sent %d of %d", m.sent.Load(), published)
		}
		time.Sleep(2 * time.Millisecond) // lets the exporter run; nothing is asserted on time
	}
	sentWhileBlocked, droppedWhileBlocked := m.sent.Load(), m.dropped[0].Load()
	stop()
	closePeer() // the blocked write fails; the rest is dropped at the flush deadline
	<-done
	t.Logf("published %d records into a collector that stopped reading: %d written before it stalled, %d dropped for a full queue while it was stuck; after it went away: sent %d, dropped %d (queue full %d, send error %d, stop %d)",
		published, sentWhileBlocked, droppedWhileBlocked, m.sent.Load(), m.droppedTotal(), m.dropped[0].Load(), m.dropped[1].Load(), m.dropped[2].Load())
	if m.sent.Load()+m.droppedTotal() != int64(published) {
		t.Errorf("sent %d + dropped %d != published %d", m.sent.Load(), m.droppedTotal(), published)
	}
	if m.errors.Load() == 0 || m.up.Load() {
		t.Errorf("errors %d, up %v: the failed write must count and mark the exporter down", m.errors.Load(), m.up.Load())
	}
}

// TestExportKeepsResults: a live receiver exporting to a TCP collector that
// never reads, a UDP port nobody listens on and a Kafka broker that stalls
// publishes exactly the results of one without export, with drops counted.
func TestExportKeepsResults(t *testing.T) {
	dir := t.TempDir()
	a, b := captures(t, dir, 46)
	run := func(configure func(*config.Receiver)) ([]any, prometheus.Gatherer) {
		l := startLiveRun(t, t.TempDir(), a, b, configure)
		l.waitIntervals(t, 3)
		recs := l.stop(t)
		out := make([]any, len(recs))
		for i := range recs {
			out[i] = recs[i]
		}
		return out, l.rx.Metrics().Registry()
	}
	plain, _ := run(func(*config.Receiver) {})
	kafka := stalledKafka(t)
	for _, tc := range []struct {
		name      string
		configure func(*config.Receiver)
		exporter  string
	}{
		{"tcp-and-kafka", func(r *config.Receiver) {
			r.Export.IPFIX.Collectors, r.Export.IPFIX.Transport = []string{deadTCPPeer(t)}, "tcp"
			r.Export.Kafka.Brokers, r.Export.Kafka.QueueRecords = kafka.ListenAddrs(), 16
			r.Export.FlushTimeout = 500 * time.Millisecond
		}, "kafka"},
		{"udp-dead-port", func(r *config.Receiver) {
			r.Export.IPFIX.Collectors = []string{deadUDPPort(t)}
		}, "ipfix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reg := run(tc.configure)
			if !reflect.DeepEqual(got, plain) {
				t.Fatalf("results with export differ from results without: %d vs %d records", len(got), len(plain))
			}
			dropped, errs := counter(t, reg, "lds_export_dropped_records_total", tc.exporter), counter(t, reg, "lds_export_errors_total", tc.exporter)
			t.Logf("%d records identical to the run without export; %s exporter: %v records dropped, %v errors", len(got), tc.exporter, dropped, errs)
			if dropped == 0 {
				t.Errorf("%s exporter: nothing dropped against a blackhole", tc.exporter)
			}
		})
	}
}

// counter sums a counter family's series of one exporter kind.
func counter(t *testing.T, g prometheus.Gatherer, name, exporter string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "exporter") == exporter {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
