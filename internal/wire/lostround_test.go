package wire

import (
	"context"
	"github.com/lds-net/lds/test/testutil"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/interval"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// lostRecHandler is recHandler that asks a question about every interval
// it receives and records the answers; done ends a finished stream.
type lostRecHandler struct {
	*recHandler
	queries  chan *ldsv1.LostQuery
	done     chan struct{}
	mu       sync.Mutex
	answers  []*ldsv1.LostAnswer
	finished int
}

func (h *lostRecHandler) LostQueries(string) (<-chan *ldsv1.LostQuery, <-chan struct{}) {
	return h.queries, h.done
}

func (h *lostRecHandler) LostAnswer(_ string, a *ldsv1.LostAnswer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answers = append(h.answers, a)
}

func (h *lostRecHandler) Finished(string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finished++
}

func (h *lostRecHandler) count() (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.answers), h.finished
}

// TestLostRoundOverTheStream: the receiver's questions reach the sender on
// the stream, its answers come back between intervals without breaking
// the seq chain (every interval is still delivered), a finished sender
// keeps answering until the receiver ends the stream, and then Run
// returns.
func TestLostRoundOverTheStream(t *testing.T) {
	k := capture.MustParseFlowKey("10.0.0.1", "192.0.2.7", 6, 51000, 443)
	h := &lostRecHandler{recHandler: newRecHandler(), queries: make(chan *ldsv1.LostQuery, 16), done: make(chan struct{})}
	h.onInterval = func(_ string, id int64) error {
		h.queries <- &ldsv1.LostQuery{Interval: id, Hashes: []uint64{uint64(id), 99}}
		return nil
	}
	addr, _ := startServer(t, nil, serverConfig(), h, nil, 4<<20)
	cfg := clientConfig(addr, "s1")
	cfg.MaxLostQuery, cfg.WaitFinished = 10, true
	cfg.Answer = func(id int64, hashes []uint64) ([]byte, bool) {
		// The sender logged the packet whose hash is the interval id.
		return AppendLostAnswer(nil, id*int64(time.Second), []interval.LoggedPacket{{Hash: uint64(id), SentNS: id*int64(time.Second) + 7, Key: k}}), false
	}
	c, err := NewClient(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := runClient(ctx, c)
	for id := int64(1); id <= 4; id++ {
		if err := c.Submit(makeInterval(t, testParams(), id, 100, uint64(id)), testMeta()); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	testutil.WaitFor(t, "four answers and Finished", 10*time.Second, func() bool { n, f := h.count(); return n == 4 && f == 1 })
	select {
	case err := <-res:
		t.Fatalf("a finished sender waiting for the receiver returned before the stream ended: %v", err)
	default:
	}
	close(h.done)
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the sender did not return once the receiver ended the stream")
	}
	if got := h.ids("s1"); len(got) != 4 {
		t.Errorf("intervals delivered %v, want 4 (answers between them keep the seq chain)", got)
	}
	for _, a := range h.answers {
		ps, err := DecodeLostAnswer(a.Packets, map[uint64]bool{uint64(a.Interval): true, 99: true}, a.Interval*int64(time.Second), int64(time.Second))
		if err != nil || a.Gone || len(ps) != 1 || ps[0].Key != k || ps[0].SentNS != a.Interval*int64(time.Second)+7 {
			t.Errorf("answer about interval %d: %v, %v (gone %v)", a.Interval, ps, err, a.Gone)
		}
	}
}
