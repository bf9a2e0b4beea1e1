package export_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/export"
	"github.com/lds-net/lds/internal/results"
	exportv1 "github.com/lds-net/lds/proto/lds/export/v1"
)

const topic = "lds.flows"

func kafkaCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(4, topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type consumed struct {
	key       []byte
	partition int32
	msg       *exportv1.FlowRecord
}

// consumeAll reads the topic from the start until n records arrived.
func consumeAll(t *testing.T, c *kfake.Cluster, n int) []consumed {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out []consumed
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d records of %d within 90s", len(out), n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			m := &exportv1.FlowRecord{}
			if err := proto.Unmarshal(r.Value, m); err != nil {
				t.Errorf("record at offset %d: %v", r.Offset, err)
				return
			}
			out = append(out, consumed{key: r.Key, partition: r.Partition, msg: m})
		})
	}
	return out
}

func eqPtr(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b || (math.IsNaN(*a) && math.IsNaN(*b))
}

// checkKafka holds the consumed messages to the JSONL, record for record.
func checkKafka(t *testing.T, recs []results.FlowRecord, got []consumed, intervalNS int64) {
	t.Helper()
	if len(got) != len(recs) {
		t.Errorf("consumed %d messages, the JSONL has %d records", len(got), len(recs))
	}
	byKey := map[recKey]consumed{}
	partOf := map[string]int32{}
	for _, g := range got {
		m := g.msg
		k := recKey{m.Interval, m.Src, m.Dst, uint16(m.Sport), uint16(m.Dport), uint8(m.Proto)}
		if _, dup := byKey[k]; dup {
			t.Errorf("%+v consumed twice", k)
		}
		byKey[k] = g
		if p, ok := partOf[string(g.key)]; ok && p != g.partition {
			t.Errorf("flow key %x in partitions %d and %d", g.key, p, g.partition)
		}
		partOf[string(g.key)] = g.partition
	}
	for i := range recs {
		r := &recs[i]
		g, ok := byKey[keyOf(r)]
		if !ok {
			t.Errorf("%s: not consumed", describe(r))
			continue
		}
		m := g.msg
		if !bytes.Equal(g.key, export.FlowKey(r)) || len(g.key) != 37 {
			t.Errorf("%s: key %x, want the 37-byte 5-tuple", describe(r), g.key)
		}
		if m.StartNs != r.StartNS || m.EndNs != r.StartNS+intervalNS || m.Sender != r.Sender || m.Packets != r.Packets ||
			!eqPtr(m.Loss, r.Loss) || m.Samples != r.Samples || !eqPtr(m.DelayNs, r.DelayNS) || !eqPtr(m.StddevNs, r.StddevNS) ||
			!eqPtr(m.Ci95Ns, r.CI95NS) || m.Status != string(r.Status) || m.Estimator != r.Estimator || m.Partial != r.Partial ||
			!eqPtr(m.LossPoint, r.LossPoint) || !eqPtr(m.LossBound, r.LossBound) || !eqPtr(m.P50Ns, r.P50NS) || !eqPtr(m.P90Ns, r.P90NS) ||
			!eqPtr(m.P99Ns, r.P99NS) || m.DelaySamples != uint32(r.DelaySamples) {
			t.Errorf("%s: message %v differs from the JSONL record %+v", describe(r), m, *r)
		}
	}
	t.Logf("%d Kafka messages checked against the JSONL in %d partitions", len(recs), len(distinct(partOf)))
}

func distinct(m map[string]int32) map[int32]bool {
	s := map[int32]bool{}
	for _, p := range m {
		s[p] = true
	}
	return s
}

// TestKafkaReplay backfills a topic on franz-go's in-process broker through
// the real client and consumes it back.
func TestKafkaReplay(t *testing.T) {
	c := kafkaCluster(t)
	dir := t.TempDir()
	a, b := captures(t, dir, 45)
	recs := replayTo(t, dir, a, b, func(r *config.Receiver) {
		r.Export.Kafka.Brokers = c.ListenAddrs()
	})
	checkKafka(t, recs, consumeAll(t, c, len(recs)), int64(time.Second))
}

// countMetrics records what the exporters report.
type countMetrics struct {
	sent, errors atomic.Int64
	dropped      [4]atomic.Int64 // queue_full, send_error, stop, encode
	up           atomic.Bool
	queued       atomic.Int64
}

func (m *countMetrics) ExportSent(_, _ string, n int) { m.sent.Add(int64(n)) }
func (m *countMetrics) ExportDropped(_, _, reason string, n int) {
	i := map[string]int{export.DropQueueFull: 0, export.DropSendError: 1, export.DropStop: 2, export.DropEncode: 3}[reason]
	m.dropped[i].Add(int64(n))
}
func (m *countMetrics) ExportError(_, _ string)         { m.errors.Add(1) }
func (m *countMetrics) ExportUp(_, _ string, up bool)   { m.up.Store(up) }
func (m *countMetrics) ExportQueued(_, _ string, n int) { m.queued.Store(int64(n)) }
func (m *countMetrics) droppedTotal() int64 {
	return m.dropped[0].Load() + m.dropped[1].Load() + m.dropped[2].Load() + m.dropped[3].Load()
}

// flows makes n records of one interval, each its own flow.
func flows(interval int64, n int) *results.Interval {
	iv := &results.Interval{Sender: "edge-a", Interval: interval, StartNS: interval * 1e9, Outcome: results.OutcomeMatched}
	for i := range n {
		d := float64(1000 + i)
		iv.Flows = append(iv.Flows, results.FlowRecord{Interval: interval, StartNS: interval * 1e9,
			Key: capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, uint16(1024+i), 443), DelayNS: &d, Packets: 10, Sender: "edge-a", Estimator: "decode"})
	}
	return iv
}

// TestKafkaBrokerAwayAndBack: while the broker is gone, records fill the
// bounded buffer and the rest are dropped and counted; once it returns,
// everything the buffer held arrives, once each.
func TestKafkaBrokerAwayAndBack(t *testing.T) {
	c := kafkaCluster(t)
	var down atomic.Bool
	down.Store(true)
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if down.Load() {
			return nil, errors.New("broker away"), true // the connection is closed
		}
		return nil, nil, false
	})
	cfg := export.DefaultConfig()
	cfg.Kafka.Brokers = c.ListenAddrs()
	cfg.Kafka.QueueRecords = 200
	m := &countMetrics{}
	set, err := export.New(cfg, export.Options{IntervalNS: 1e9}, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); set.Run(ctx) }()
	published := 0
	for iv := int64(1); m.dropped[0].Load() == 0; iv++ {
		set.Publish(flows(iv, 50)) // returns at once: the broker is away
		published += 50
		if iv > 1000 {
			t.Fatal("no record dropped after 1000 intervals with the broker away")
		}
		time.Sleep(10 * time.Millisecond) // let the producer goroutine take its batches
	}
	if m.up.Load() || m.errors.Load() == 0 {
		t.Errorf("broker away: up %v, errors %d; want down with errors counted", m.up.Load(), m.errors.Load())
	}
	down.Store(false)
	want := int64(published) - m.dropped[0].Load()
	got := consumeAll(t, c, int(want))
	stop()
	<-done
	seen := map[string]bool{}
	for _, g := range got {
		k := string(g.key) + string(rune(g.msg.Interval))
		if seen[k] {
			t.Errorf("record of interval %d port %d delivered twice", g.msg.Interval, g.msg.Sport)
		}
		seen[k] = true
	}
	if int64(len(got)) != want || m.sent.Load() != want || m.droppedTotal() != int64(published)-want {
		t.Errorf("published %d, dropped %d (queue full), consumed %d, acknowledged %d, dropped in all %d",
			published, m.dropped[0].Load(), len(got), m.sent.Load(), m.droppedTotal())
	}
	if !m.up.Load() {
		t.Error("broker back: exporter not up")
	}
	t.Logf("published %d records with the broker away: %d buffered and delivered after it returned, %d dropped and counted",
		published, want, m.dropped[0].Load())
}
