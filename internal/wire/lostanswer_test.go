package wire

import (
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
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

// TestClientAnswerBounded: a LostQuery of more hashes than the sender's
// table can list is answered gone without a lookup; one within it is
// looked up; without a log the answer is gone.
func TestClientAnswerBounded(t *testing.T) {
	looked := 0
	cfg := clientConfig("127.0.0.1:1", "s1")
	cfg.MaxLostQuery = 3
	cfg.Answer = func(id int64, hashes []uint64) ([]byte, bool) {
		looked++
		return AppendLostAnswer(nil, id*int64(time.Second), nil), false
	}
	c, err := NewClient(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	c.answer(&ldsv1.LostQuery{Interval: 5, Hashes: []uint64{1, 2, 3, 4}})
	c.answer(&ldsv1.LostQuery{Interval: 6, Hashes: []uint64{1, 2, 3}})
	if len(c.answers) != 2 || looked != 1 {
		t.Fatalf("%d answers queued, %d lookups; want 2 and 1", len(c.answers), looked)
	}
	if a := c.answers[0].GetLostAnswer(); a.Interval != 5 || !a.Gone || a.Packets != nil {
		t.Errorf("oversized query answered %+v, want gone without packets", a)
	}
	if a := c.answers[1].GetLostAnswer(); a.Interval != 6 || a.Gone {
		t.Errorf("query within the bound answered %+v, want looked up", a)
	}
	cfg.Answer = nil
	c2, _ := NewClient(cfg, testLog(t))
	c2.answer(&ldsv1.LostQuery{Interval: 7, Hashes: []uint64{1}})
	if a := c2.answers[0].GetLostAnswer(); !a.Gone {
		t.Errorf("a sender without logs answered %+v, want gone", a)
	}
}
