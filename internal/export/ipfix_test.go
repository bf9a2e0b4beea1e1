package export_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/export"
	"github.com/lds-net/lds/internal/results"
)

// udpMessages collects the datagrams a UDP collector receives.
func udpMessages(t *testing.T) (string, <-chan []byte) {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadBuffer(8 << 20)
	ch := make(chan []byte, 100000)
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			ch <- append([]byte(nil), buf[:n]...)
		}
	}()
	t.Cleanup(func() { c.Close() })
	return c.LocalAddr().String(), ch
}

// TestIPFIXOverUDP: messages under max_message_bytes, templates at the start
// and again every template_refresh_messages messages (RFC 7011 §8.4),
// sequence numbers counting data records per observation domain, one domain
// per sender.
func TestIPFIXOverUDP(t *testing.T) {
	addr, ch := udpMessages(t)
	cfg := export.DefaultConfig()
	cfg.IPFIX.Collectors = []string{addr}
	cfg.IPFIX.MaxMessageBytes = 1200
	cfg.IPFIX.TemplateRefreshMessages = 5
	cfg.IPFIX.ObservationDomains = map[string]uint32{"edge-b": 7}
	m := &countMetrics{}
	set, err := export.New(cfg, export.Options{IntervalNS: 1e9}, m, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); set.Run(ctx) }()
	a, b := flows(1, 200), flows(1, 50)
	b.Sender = "edge-b"
	for i := range b.Flows {
		b.Flows[i].Sender = "edge-b"
		setAddrs(&b.Flows[i], "2001:db8::1", "2001:db8::2")
	}
	set.Publish(a)
	set.Publish(b)
	stop()
	<-done
	if m.sent.Load() != 250 || m.droppedTotal() != 0 {
		t.Fatalf("sent %d, dropped %d; want 250, 0", m.sent.Load(), m.droppedTotal())
	}
	dec := export.NewDecoder()
	seq := map[uint32]uint32{}
	msgs := map[uint32]int{}
	recs := map[uint32]int{}
	for recs[export.DomainID("edge-a", nil)]+recs[7] < 250 {
		var msg []byte
		select {
		case msg = <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("received %v records", recs)
		}
		if len(msg) > cfg.IPFIX.MaxMessageBytes {
			t.Errorf("message of %d bytes above max_message_bytes %d", len(msg), cfg.IPFIX.MaxMessageBytes)
		}
		d, err := dec.Decode(msg)
		if err != nil {
			t.Fatal(err)
		}
		if d.Sequence != seq[d.Domain] {
			t.Errorf("domain %d: sequence %d, want %d", d.Domain, d.Sequence, seq[d.Domain])
		}
		wantTpl := msgs[d.Domain]%cfg.IPFIX.TemplateRefreshMessages == 0 // messages 0, N, 2N, ... carry them
		if (d.Templates > 0) != wantTpl {
			t.Errorf("domain %d message %d: %d template records (refresh every %d messages)", d.Domain, msgs[d.Domain], d.Templates, cfg.IPFIX.TemplateRefreshMessages)
		}
		seq[d.Domain] += uint32(len(d.Records))
		msgs[d.Domain]++
		recs[d.Domain] += len(d.Records)
	}
	if recs[7] != 50 || recs[export.DomainID("edge-a", nil)] != 200 {
		t.Errorf("records by domain %v: want 200 in edge-a's hashed domain, 50 in the configured 7", recs)
	}
}

// FuzzDecode: the decoder never panics on arbitrary bytes, and what the
// encoder writes always decodes to its records.
func FuzzDecode(f *testing.F) {
	iv := flows(1, 3)
	setAddrs(&iv.Flows[1], "2001:db8::1", "2001:db8::2")
	iv.Flows[1].DelayNS = nil
	iv.Flows[2].Status = results.Status(strings.Repeat("x", 300)) // a long variable-length field
	msgs := export.EncodeMessages(iv.Flows, 9, export.DefaultEnterpriseNumber, 4000, 1e9)
	seed := msgs[0]
	f.Add(seed)
	f.Add(seed[:20])
	f.Add([]byte{0, 10, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	// A template of one zero-length field, then a data set of it.
	f.Add([]byte{0, 10, 0, 36, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 12, 1, 0, 0, 1, 0, 8, 0, 0, 1, 0, 0, 8, 1, 2, 3, 4})
	// A template of no fields, then a data set of it.
	f.Add([]byte{0, 10, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 8, 1, 0, 0, 0, 1, 0, 0, 8, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		dec := export.NewDecoder()
		m, err := dec.Decode(seed)
		if err != nil || len(m.Records) != 3 || m.Domain != 9 {
			t.Fatalf("the encoder's message does not decode to its 3 records: %v", err)
		}
		if m, err := dec.Decode(b); err == nil {
			for _, r := range m.Records {
				_, _ = export.Uint(r, export.IANA(export.IEPacketDeltaCount))
				_ = export.Float(r, export.FieldKey{PEN: export.DefaultEnterpriseNumber, ID: export.EntDelayMeanNS})
			}
		}
		if n, err := export.MessageLength(b); err == nil && n < 16 {
			t.Fatalf("MessageLength %d below the header", n)
		}
	})
}

// TestIPFIXFlags: the flag bits say spike, loss_spike and where the mean
// delay came from (delay_from), record by record.
func TestIPFIXFlags(t *testing.T) {
	iv := flows(1, 5)
	want := []uint64{export.FlagDelayFromSketch, export.FlagDelayFromSamples | export.FlagSpike,
		export.FlagDelayFromSketch | export.FlagDelayFromSamples | export.FlagLossSpike, 0, export.FlagSpike | export.FlagLossSpike}
	iv.Flows[0].DelayFrom = results.DelayFromSketch
	iv.Flows[1].DelayFrom, iv.Flows[1].Spike = results.DelayFromSamples, true
	iv.Flows[2].DelayFrom, iv.Flows[2].LossSpike = results.DelayFromBoth, true
	iv.Flows[3].DelayNS = nil
	iv.Flows[4].Spike, iv.Flows[4].LossSpike = true, true
	for i := range iv.Flows {
		iv.Flows[i].Partial, iv.Flows[i].Unsynced = false, false
	}
	msgs := export.EncodeMessages(iv.Flows, 9, export.DefaultEnterpriseNumber, 4000, 1e9)
	m, err := export.NewDecoder().Decode(msgs[0])
	if err != nil || len(m.Records) != 5 {
		t.Fatalf("decode: %v, %d records", err, len(m.Records))
	}
	for i, r := range m.Records {
		got, _ := export.Uint(r, export.FieldKey{PEN: export.DefaultEnterpriseNumber, ID: export.EntFlags})
		if got != want[i] {
			t.Errorf("record %d: flags %#x, want %#x", i, got, want[i])
		}
	}
}
