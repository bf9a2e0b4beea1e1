package wire

import (
	"testing"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
)

func answerFixture() ([]interval.LoggedPacket, map[uint64]bool) {
	k4 := capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443)
	k6 := capture.MustParseFlowKey("2001:db8::1", "2001:db8::2", 17, 5353, 53)
	ps := []interval.LoggedPacket{
		{Hash: 1, SentNS: 7e9 + 5, Key: k4, IDKind: capture.IDTCPSeq, ID: 4242},
		{Hash: 2, SentNS: 7e9 + 999_999_999, Key: k6},
		{Hash: 3, SentNS: 7e9, Key: k4, IDKind: capture.IDIPv4, ID: 65535},
	}
	return ps, map[uint64]bool{1: true, 2: true, 3: true, 4: true}
}

// TestLostAnswerRoundTrip: an answer decodes to what was encoded.
func TestLostAnswerRoundTrip(t *testing.T) {
	ps, asked := answerFixture()
	got, err := DecodeLostAnswer(AppendLostAnswer(nil, 7e9, ps), asked, 7e9, 1e9)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ps) {
		t.Fatalf("decoded %d packets, want %d", len(got), len(ps))
	}
	for i := range ps {
		if got[i] != ps[i] {
			t.Errorf("packet %d: %+v, want %+v", i, got[i], ps[i])
		}
	}
}

// TestLostAnswerRefuses: the receiver accepts only answers to the hashes
// it asked, once each, sent inside the interval, well formed.
func TestLostAnswerRefuses(t *testing.T) {
	ps, asked := answerFixture()
	good := AppendLostAnswer(nil, 7e9, ps)
	for _, c := range []struct {
		name  string
		b     []byte
		asked map[uint64]bool
		start int64
	}{
		{"empty", nil, asked, 7e9},
		{"bad magic", append([]byte("XX"), good[2:]...), asked, 7e9},
		{"other version", append([]byte("LA\x02"), good[3:]...), asked, 7e9},
		{"truncated", good[:len(good)-1], asked, 7e9},
		{"trailing", append(append([]byte(nil), good...), 0), asked, 7e9},
		{"hash not asked", good, map[uint64]bool{1: true, 3: true, 9: true, 10: true}, 7e9},
		{"more packets than asked", good, map[uint64]bool{1: true, 2: true}, 7e9},
		{"answered twice", AppendLostAnswer(nil, 7e9, []interval.LoggedPacket{ps[0], ps[0]}), asked, 7e9},
		{"sent after the interval", AppendLostAnswer(nil, 7e9, []interval.LoggedPacket{{Hash: 1, SentNS: 8e9, Key: ps[0].Key}}), asked, 7e9},
		{"sent before the interval", AppendLostAnswer(nil, 7e9, []interval.LoggedPacket{{Hash: 1, SentNS: 7e9 - 1, Key: ps[0].Key}}), asked, 7e9},
		{"ID without a kind", AppendLostAnswer(nil, 7e9, []interval.LoggedPacket{{Hash: 1, SentNS: 7e9, Key: ps[0].Key, ID: 5}}), asked, 7e9},
		{"unknown ID kind", AppendLostAnswer(nil, 7e9, []interval.LoggedPacket{{Hash: 1, SentNS: 7e9, Key: ps[0].Key, IDKind: 7}}), asked, 7e9},
	} {
		if _, err := DecodeLostAnswer(c.b, c.asked, c.start, 1e9); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// FuzzDecodeLostAnswer: whatever the bytes, decoding never panics, lists
// at most the hashes asked (each asked, once, inside the interval), and
// what decodes encodes back to the same bytes.
func FuzzDecodeLostAnswer(f *testing.F) {
	ps, asked := answerFixture()
	f.Add(AppendLostAnswer(nil, 7e9, ps))
	f.Add(AppendLostAnswer(nil, 7e9, nil))
	f.Add([]byte("LA\x01\xff\xff\xff\xff\x0f"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeLostAnswer(b, asked, 7e9, 1e9)
		if err != nil {
			return
		}
		if len(got) > len(asked) {
			t.Fatalf("decoded %d packets, %d asked", len(got), len(asked))
		}
		seen := map[uint64]bool{}
		for _, p := range got {
			if !asked[p.Hash] || seen[p.Hash] || p.SentNS < 7e9 || p.SentNS >= 8e9 {
				t.Fatalf("accepted %+v", p)
			}
			seen[p.Hash] = true
		}
		if again, err := DecodeLostAnswer(AppendLostAnswer(nil, 7e9, got), asked, 7e9, 1e9); err != nil || len(again) != len(got) {
			t.Fatalf("re-encoding a decoded answer: %v", err)
		}
	})
}
