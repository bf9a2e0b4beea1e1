package export_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/export"
)

// TestRecordSizes measures the bytes a record costs on each export, from a
// replay's real records (docs/operations.md, "Sizing", quotes its log:
// go test -run TestRecordSizes -v ./internal/export/).
func TestRecordSizes(t *testing.T) {
	dir := t.TempDir()
	a, b := captures(t, dir, 47)
	recs := replayTo(t, dir, a, b, func(*config.Receiver) {})
	for _, mtu := range []int{1400, 8960} {
		msgs := export.EncodeMessages(recs, 1, export.DefaultEnterpriseNumber, mtu, 1e9)
		total := 0
		for _, m := range msgs {
			if len(m) > mtu {
				t.Errorf("message of %d bytes above %d", len(m), mtu)
			}
			total += len(m)
		}
		// The first message carries the templates; data bytes per record
		// are taken from the rest.
		tpl := len(export.EncodeMessages(nil, 1, export.DefaultEnterpriseNumber, mtu, 1e9)[0])
		t.Logf("IPFIX, max_message_bytes %d: %d records in %d messages, %d bytes (templates %d): %.1f bytes/record with headers, +28 B IP/UDP per message",
			mtu, len(recs), len(msgs), total, tpl, float64(total-tpl)/float64(len(recs)))
	}
	pb := 0
	for i := range recs {
		pb += proto.Size(export.ToProto(&recs[i], 1e9)) + len(export.FlowKey(&recs[i]))
	}
	t.Logf("Kafka: %.1f bytes/record (protobuf value + 37-byte key), before batching and compression", float64(pb)/float64(len(recs)))
}
