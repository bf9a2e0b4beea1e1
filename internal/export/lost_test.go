package export_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/replay"
	"github.com/lds-net/lds/internal/results"
	exportv1 "github.com/lds-net/lds/proto/lds/export/v1"
)

// TestKafkaLostTopic: every line of the lost-packet file arrives once on
// export.kafka.lost_topic, field for field.
func TestKafkaLostTopic(t *testing.T) {
	const lostTopic = "lds.lost"
	c := kafkaCluster(t, kfake.SeedTopics(2, lostTopic))
	dir := t.TempDir()
	a, b := captures(t, dir, 46)
	cfg, err := replay.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Export.Kafka.Brokers = c.ListenAddrs()
	out, lostOut := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "lost.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := replay.Run(ctx, replay.Options{Config: cfg, SenderPcap: a, ReceiverPcap: b, Out: out, LostOut: lostOut}, quiet()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(lostOut)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	want := map[string]int{}
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var p results.LostPacket
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		want[lostString(&p)]++
		n++
	}
	if n < 50 {
		t.Fatalf("only %d lost packets listed", n)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(lostTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d lost packets", got, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			m := &exportv1.LostPacket{}
			if err := proto.Unmarshal(r.Value, m); err != nil {
				t.Errorf("offset %d: %v", r.Offset, err)
				return
			}
			got++
			k, err := capture.ParseFlowKey(m.Src, m.Dst, uint8(m.Proto), uint16(m.Sport), uint16(m.Dport))
			if err != nil {
				t.Error(err)
				return
			}
			p := results.LostPacket{Interval: m.Interval, Sender: m.Sender, Key: k, SentNS: m.SentNs, Extra: m.Kind == results.LostKindExtra}
			if m.Id != nil {
				p.ID = *m.Id
				p.IDKind = map[string]capture.IDKind{results.IDKindTCPSeq: capture.IDTCPSeq, results.IDKindIPv4: capture.IDIPv4}[m.IdKind]
			}
			s := lostString(&p)
			if want[s] == 0 {
				t.Errorf("consumed %s, not in the lost file (or twice)", s)
			}
			want[s]--
			if !m.ListComplete {
				t.Errorf("%s: list_complete false on a run within capacity", s)
			}
		})
	}
	t.Logf("%d lost-packet messages checked against the lost file", got)
}

func lostString(p *results.LostPacket) string {
	b := results.MarshalLostLine(nil, p)
	return string(b)
}
