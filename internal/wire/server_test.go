package wire

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/lds-net/lds/internal/config"
	"github.com/lds-net/lds/internal/interval"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
	"github.com/lds-net/lds/test/testutil"
)

// recHandler is a wire.Handler that records what the server hands it.
type recHandler struct {
	mu         sync.Mutex
	connected  []string
	got        map[string][]*Interval
	voided     []int64
	frameErrs  []string
	disconnect []error
	have       []int64
	errSenders []string // the sender label of every FrameError
	// exclusive refuses a Connected while the same sender is connected,
	// as the receiver does.
	exclusive bool
	live      map[string]bool
	// onInterval, when set, runs before an interval is recorded; an error ends the stream.
	onInterval func(sender string, id int64) error
}

func newRecHandler() *recHandler { return &recHandler{got: map[string][]*Interval{}} }

func (h *recHandler) Connected(sender string, _ uint64) ([]int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exclusive {
		if h.live[sender] {
			return nil, errors.New("already connected")
		}
		if h.live == nil {
			h.live = map[string]bool{}
		}
		h.live[sender] = true
	}
	h.connected = append(h.connected, sender)
	return slices.Clone(h.have), nil
}

func (h *recHandler) Interval(sender string, r *Result) error {
	if r.Kind == Voided {
		h.mu.Lock()
		h.voided = append(h.voided, r.Voided...)
		h.mu.Unlock()
		return nil
	}
	if h.onInterval != nil {
		if err := h.onInterval(sender, r.Interval.ID); err != nil {
			return err
		}
	}
	h.mu.Lock()
	h.got[sender] = append(h.got[sender], r.Interval)
	h.mu.Unlock()
	return nil
}

func (h *recHandler) Disconnected(sender string, err error) {
	h.mu.Lock()
	delete(h.live, sender)
	h.disconnect = append(h.disconnect, err)
	h.mu.Unlock()
}

func (h *recHandler) FrameError(sender, reason string) {
	h.mu.Lock()
	h.frameErrs = append(h.frameErrs, reason)
	h.errSenders = append(h.errSenders, sender)
	h.mu.Unlock()
}

func (h *recHandler) ids(sender string) []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []int64
	for _, si := range h.got[sender] {
		ids = append(ids, si.ID)
	}
	return ids
}

func (h *recHandler) connects() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.connected)
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func serverConfig() ServerConfig {
	p := testParams()
	return ServerConfig{Fingerprint: map[string]string{"interval": "1s", "sketch.columns": "64"}, Params: p,
		Limits: testLimits(p), Version: "test"}
}

// startServer serves h on lis (a fresh loopback port when nil) and returns
// its address and a function that kills it.
func startServer(t *testing.T, lis net.Listener, cfg ServerConfig, h Handler, creds credentials.TransportCredentials, maxFrame int) (string, func()) {
	t.Helper()
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	srv := grpc.NewServer(ServerOptions(creds, maxFrame)...)
	ldsv1.RegisterSketchExchangeServer(srv, NewServer(cfg, h, testLog(t)))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	var once sync.Once
	stop := func() { once.Do(func() { srv.Stop(); <-done }) }
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

func clientConfig(addr, id string) ClientConfig {
	return ClientConfig{Addr: addr, SenderID: id, Version: "test", Fingerprint: serverConfig().Fingerprint,
		ResendBuffer: 32, BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Keepalive: 30 * time.Second, RPCTimeout: 3 * time.Second, ChunkBytes: 1024, FailFast: true}
}

// runClient starts c.Run and returns a channel with its result.
func runClient(ctx context.Context, c *Client) chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.Run(ctx) }()
	return ch
}

func waitErr(t *testing.T, ch chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("client did not return within %v", d)
		return nil
	}
}

// testStream is a hand-made stream that answers the receiver's Challenge:
// a Hello sent without a seed proof gets a nonce and the proof for seed.
type testStream struct {
	ldsv1.SketchExchange_StreamClient
	conn      *grpc.ClientConn
	seed      string
	challenge []byte
	chalErr   error
	read      bool
}

func (s *testStream) Send(f *ldsv1.SenderFrame) error {
	if h := f.GetHello(); h != nil && h.SeedProof == nil {
		if !s.read {
			s.read = true
			r, err := s.SketchExchange_StreamClient.Recv()
			s.challenge, s.chalErr = r.GetChallenge().GetNonce(), err
		}
		if s.chalErr != nil {
			return s.chalErr
		}
		h.Nonce = newNonce()
		h.SeedProof = SeedProof(s.seed, s.challenge, h.Nonce, h.SenderId)
	}
	return s.SketchExchange_StreamClient.Send(f)
}

// rawStream opens a stream with a plain gRPC client, for hand-made frames.
func rawStream(t *testing.T, ctx context.Context, addr string, creds credentials.TransportCredentials) *testStream {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := ldsv1.NewSketchExchangeClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &testStream{SketchExchange_StreamClient: st, conn: conn}
}

func hello(id string, fp map[string]string) *ldsv1.SenderFrame {
	return &ldsv1.SenderFrame{Seq: 0, Body: &ldsv1.SenderFrame_Hello{Hello: &ldsv1.Hello{SenderId: id, Fingerprint: fp, Instance: 1}}}
}

// recvUntilErr reads until the stream ends and returns its status.
func recvUntilErr(st ldsv1.SketchExchange_StreamClient) (acks []int64, err error) {
	for {
		f, err := st.Recv()
		if err != nil {
			return acks, err
		}
		if a := f.GetAck(); a != nil {
			acks = append(acks, a.Interval)
		}
	}
}

func TestStreamDeliversEveryInterval(t *testing.T) {
	h := newRecHandler()
	addr, _ := startServer(t, nil, serverConfig(), h, nil, 1<<20)
	c, err := NewClient(clientConfig(addr, "s1"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	done := runClient(ctx, c)
	p := testParams()
	var sent []*interval.SenderInterval
	for id := int64(100); id < 105; id++ {
		si := makeInterval(t, p, id, 300, uint64(id))
		sent = append(sent, si)
		if err := c.Submit(si, testMeta()); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if err := waitErr(t, done, 8*time.Second); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	got := h.got["s1"]
	h.mu.Unlock()
	if len(got) != len(sent) {
		t.Fatalf("receiver got %d intervals, sent %d", len(got), len(sent))
	}
	for i := range sent {
		if got[i].ID != sent[i].ID || !got[i].LDS.Equal(sent[i].Sk.LDS) || !sameSplit(got[i], sent[i]) {
			t.Errorf("interval %d arrived different from what was sent", sent[i].ID)
		}
	}
	if st := c.Stats(); st.Acked != uint64(len(sent)) || st.Buffered != 0 || st.Dropped != 0 {
		t.Errorf("client stats %+v, want %d acked, nothing buffered or dropped", st, len(sent))
	}
}

// TestConfigMismatchNamesKeys: the receiver refuses a sender whose
// configuration differs, naming exactly the differing keys and never the
// seed; so too a sender of another hash version, and one of a build whose
// fingerprint carried a second hash version (docs/protocol.md, "Versions").
func TestConfigMismatchNamesKeys(t *testing.T) {
	base := config.DefaultCommon()
	base.Sketch.Seed = "receiver-seed-secret"
	tests := []struct {
		name   string
		mutate func(*config.Common)
		want   []string
		edit   func(fingerprint map[string]string) // what the sender's build sends otherwise; nil: nothing
	}{
		{"seed", func(c *config.Common) { c.Sketch.Seed = "sender-seed-secret" }, []string{"sketch.seed"}, nil},
		{"columns", func(c *config.Common) { c.Sketch.Columns = 2048 }, []string{"sketch.columns"}, nil},
		{"interval", func(c *config.Common) { c.Interval = 2 * time.Second }, []string{"interval"}, nil},
		{"all three", func(c *config.Common) {
			c.Sketch.Seed, c.Sketch.Columns, c.Interval = "sender-seed-secret", 2048, 2*time.Second
		}, []string{"interval", "sketch.columns", "sketch.seed"}, nil},
		{"hash version", func(*config.Common) {}, []string{"hash_version"}, func(f map[string]string) { f["hash_version"] = "3" }},
		{"a second hash version", func(*config.Common) {}, []string{"capture.hash_version"},
			func(f map[string]string) { f["capture.hash_version"] = config.HashVersion }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newRecHandler()
			cfg := serverConfig()
			cfg.Fingerprint, cfg.Seed = base.Fingerprint(), base.Sketch.Seed
			addr, _ := startServer(t, nil, cfg, h, nil, 1<<20)
			snd := base
			snd.Sketch.Sampling = slices.Clone(base.Sketch.Sampling)
			tc.mutate(&snd)
			fp := snd.Fingerprint()
			if tc.edit != nil {
				tc.edit(fp)
			}

			// The status a hand-made stream sees.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st := rawStream(t, ctx, addr, nil)
			st.seed = snd.Sketch.Seed
			if err := st.Send(hello("s1", fp)); err != nil {
				t.Fatal(err)
			}
			_, err := recvUntilErr(st)
			s, _ := status.FromError(err)
			if s.Code() != codes.FailedPrecondition {
				t.Fatalf("status %v, want FailedPrecondition", err)
			}
			wantList := "differs from the receiver's in: " + strings.Join(tc.want, ", ") + " ("
			if !strings.Contains(s.Message(), wantList) {
				t.Errorf("message %q does not list exactly %v", s.Message(), tc.want)
			}
			if strings.Contains(s.Message(), "seed-secret") {
				t.Errorf("message %q reveals a seed", s.Message())
			}

			// What the sender's client does with it (FailFast: gives up, saying why).
			c, err := NewClient(ClientConfig{Addr: addr, SenderID: "s1", Fingerprint: fp, Seed: snd.Sketch.Seed, ResendBuffer: 4,
				BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond, RPCTimeout: 2 * time.Second,
				ChunkBytes: 1024, FailFast: true}, testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			err = waitErr(t, runClient(ctx, c), 5*time.Second)
			if err == nil || !strings.Contains(err.Error(), strings.Join(tc.want, ", ")) {
				t.Errorf("client Run = %v, want a refusal naming %v", err, tc.want)
			}
			if n := h.connects(); n != 0 {
				t.Errorf("handler saw %d connections from a refused sender", n)
			}
		})
	}
}

// TestOlderSenderRefused: a sender of an older build ships the boundary as
// a CHUNK_KIND_BOUNDARY hash list; the receiver refuses the stream with
// FailedPrecondition (a refusal, not a malformed frame) saying so, and
// hands nothing to the handler.
func TestOlderSenderRefused(t *testing.T) {
	h := newRecHandler()
	addr, _ := startServer(t, nil, serverConfig(), h, nil, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := rawStream(t, ctx, addr, nil)
	if err := st.Send(hello("s1", serverConfig().Fingerprint)); err != nil {
		t.Fatal(err)
	}
	old := []*ldsv1.SenderFrame{
		{Seq: 1, Body: &ldsv1.SenderFrame_Start{Start: &ldsv1.Start{Interval: 5, TotalBytes: 4}}},
		{Seq: 2, Body: &ldsv1.SenderFrame_Chunk{Chunk: &ldsv1.Chunk{Kind: ldsv1.ChunkKind_CHUNK_KIND_BOUNDARY, Data: []byte{1, 7}, Last: true}}},
	}
	for _, f := range old {
		if err := st.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	_, err := recvUntilErr(st)
	s, _ := status.FromError(err)
	if s.Code() != codes.FailedPrecondition || !strings.Contains(s.Message(), "40-bit hash list of an older sender") ||
		!strings.Contains(s.Message(), BoundaryFormat) || !strings.Contains(s.Message(), "run the same lds version") {
		t.Errorf("status %v, want FailedPrecondition naming the old list, %s and the remedy", err, BoundaryFormat)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got["s1"]) != 0 {
		t.Errorf("handler got %d intervals from an incompatible sender", len(h.got["s1"]))
	}
}

// oldReceiver answers Hello as an older build does (no boundary format in
// HelloAck) and records any frame sent after it.
type oldReceiver struct {
	ldsv1.UnimplementedSketchExchangeServer
	mu     sync.Mutex
	frames int
}

func (o *oldReceiver) Stream(st ldsv1.SketchExchange_StreamServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	if err := st.Send(&ldsv1.ReceiverFrame{Body: &ldsv1.ReceiverFrame_HelloAck{HelloAck: &ldsv1.HelloAck{ReceiverVersion: "v-old"}}}); err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			return nil
		}
		o.mu.Lock()
		o.frames++
		o.mu.Unlock()
	}
}

// TestSenderRefusesOlderReceiver: a sender whose receiver sends no
// Challenge (an older build waits for Hello) sends it nothing, and keeps
// retrying (a receiver that is only busy looks the same) with a warning
// naming the remedy.
func TestSenderRefusesOlderReceiver(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	old := &oldReceiver{}
	ldsv1.RegisterSketchExchangeServer(srv, old)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cfg := clientConfig(lis.Addr().String(), "s1")
	cfg.RPCTimeout = 200 * time.Millisecond
	var logs lockedBuffer
	c, err := NewClient(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(makeInterval(t, testParams(), 9, 100, 1), testMeta()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := runClient(ctx, c)
	testutil.WaitFor(t, "the warning about a missing Challenge", 20*time.Second, func() bool {
		l := logs.String()
		return strings.Contains(l, "no Challenge") && strings.Contains(l, "older lds receiver") && strings.Contains(l, "run the same lds version")
	})
	cancel()
	if err := waitErr(t, done, 20*time.Second); err != nil {
		t.Errorf("client Run = %v after its context ended", err)
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	if old.frames != 0 {
		t.Errorf("the sender sent %d frames to a receiver that cannot read them", old.frames)
	}
}

// TestBadStreamsEndWhileAnotherSenderIsServed: every malformed or oversize
// stream ends with a status naming the problem, while a good sender on the
// same server keeps streaming and loses nothing.
func TestBadStreamsEndWhileAnotherSenderIsServed(t *testing.T) {
	h := newRecHandler()
	cfg := serverConfig()
	cfg.Limits.MaxSketchBytes = 64 << 10
	const maxFrame = 32 << 10
	addr, _ := startServer(t, nil, cfg, h, nil, maxFrame)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	good, err := NewClient(clientConfig(addr, "good"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	goodDone := runClient(ctx, good)
	p := testParams()
	submitted := make(chan []int64, 1)
	go func() {
		var ids []int64
		for id := int64(1); id <= 20; id++ {
			if err := good.Submit(makeInterval(t, p, id, 200, uint64(id)), testMeta()); err != nil {
				t.Error(err)
			}
			ids = append(ids, id)
			time.Sleep(10 * time.Millisecond)
		}
		good.Close()
		submitted <- ids
	}()

	fp := cfg.Fingerprint
	si := makeInterval(t, p, 50, 200, 50)
	frames := func() []*ldsv1.SenderFrame { return encodeAll(t, 1024, si) }
	tests := []struct {
		name   string
		frames func() []*ldsv1.SenderFrame
		code   codes.Code
		want   string
	}{
		{"no Hello", func() []*ldsv1.SenderFrame { return frames() }, codes.InvalidArgument, "first frame must be Hello"},
		{"empty sender id", func() []*ldsv1.SenderFrame { return []*ldsv1.SenderFrame{hello("", fp)} }, codes.InvalidArgument, "sender_id"},
		{"chunk without Start", func() []*ldsv1.SenderFrame {
			fr := frames()
			for i, f := range fr[1:] {
				f.Seq = uint64(i + 1)
			}
			return append([]*ldsv1.SenderFrame{hello("bad", fp)}, fr[1:]...)
		}, codes.InvalidArgument, "chunk outside an interval"},
		{"Start over max_sketch_bytes", func() []*ldsv1.SenderFrame {
			fr := frames()
			fr[0].GetStart().TotalBytes = 1 << 30
			return append([]*ldsv1.SenderFrame{hello("bad", fp)}, fr...)
		}, codes.ResourceExhausted, "max_sketch_bytes"},
		{"frame over max_frame_bytes", func() []*ldsv1.SenderFrame {
			fr := encodeAll(t, 1<<20, si)
			fr[1].GetChunk().Data = make([]byte, maxFrame+1)
			fr[0].GetStart().TotalBytes = maxFrame + 1
			return append([]*ldsv1.SenderFrame{hello("bad", fp)}, fr[:2]...)
		}, codes.ResourceExhausted, "larger than max"},
		{"more bytes than announced", func() []*ldsv1.SenderFrame {
			fr := frames()
			fr[0].GetStart().TotalBytes = 10
			return append([]*ldsv1.SenderFrame{hello("bad", fp)}, fr...)
		}, codes.InvalidArgument, "more than its Start announced"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := rawStream(t, ctx, addr, nil)
			for _, f := range tc.frames() {
				if err := st.Send(f); err != nil {
					break // the server already ended the stream; Recv says why
				}
			}
			_, err := recvUntilErr(st)
			s, _ := status.FromError(err)
			if s.Code() != tc.code || !strings.Contains(s.Message(), tc.want) {
				t.Errorf("status %v, want %v naming %q", err, tc.code, tc.want)
			}
		})
	}

	ids := <-submitted
	if err := waitErr(t, goodDone, 10*time.Second); err != nil {
		t.Fatalf("good sender: %v", err)
	}
	if got := h.ids("good"); !slices.Equal(got, ids) {
		t.Errorf("good sender's intervals at the receiver: %v, want %v", got, ids)
	}
	if st := good.Stats(); st.Acked != uint64(len(ids)) {
		t.Errorf("good sender: %d acknowledged, want %d", st.Acked, len(ids))
	}
	if got := h.ids("bad"); len(got) != 0 {
		t.Errorf("bad streams delivered intervals %v", got)
	}
	h.mu.Lock()
	reasons := slices.Clone(h.frameErrs)
	h.mu.Unlock()
	for _, r := range []string{"no_hello", "bad_sender_id", "malformed", "too_large"} {
		if !slices.Contains(reasons, r) {
			t.Errorf("frame error reasons %v lack %q", reasons, r)
		}
	}
	// Both the Start over max_sketch_bytes and the gRPC frame over
	// max_frame_bytes are counted.
	if n := len(slices.DeleteFunc(slices.Clone(reasons), func(r string) bool { return r != "too_large" })); n != 2 {
		t.Errorf("too_large counted %d times, want 2 (reasons %v)", n, reasons)
	}
}

// TestSeqGapOverStream: a hand-driven sender skips one seq inside an
// interval; that interval is voided (not acknowledged) and the stream goes on.
func TestSeqGapOverStream(t *testing.T) {
	h := newRecHandler()
	cfg := serverConfig()
	addr, _ := startServer(t, nil, cfg, h, nil, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := rawStream(t, ctx, addr, nil)
	if err := st.Send(hello("s1", cfg.Fingerprint)); err != nil {
		t.Fatal(err)
	}
	if f, err := st.Recv(); err != nil || f.GetHelloAck() == nil {
		t.Fatalf("no HelloAck: %v %v", f, err)
	}
	p := testParams()
	frames := encodeAll(t, 512, makeInterval(t, p, 1, 300, 1), makeInterval(t, p, 2, 300, 2), makeInterval(t, p, 3, 300, 3))
	// Skip one seq right after the Start of interval 2: every later frame
	// is one higher, as if one frame had been lost.
	start2 := slices.IndexFunc(frames, func(f *ldsv1.SenderFrame) bool { return f.GetStart().GetInterval() == 2 })
	if start2 < 0 || frames[start2+1].GetChunk() == nil {
		t.Fatal("no chunk after the Start of interval 2")
	}
	for _, f := range frames[start2+1:] {
		f.Seq++
	}
	for _, f := range frames {
		if err := st.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	acks, err := recvUntilErr(st)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v, want a clean end", err)
	}
	if !slices.Equal(acks, []int64{1, 3}) {
		t.Errorf("acks %v, want [1 3] (interval 2 voided, not acknowledged)", acks)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(h.voided, []int64{2}) {
		t.Errorf("voided %v, want [2]", h.voided)
	}
	if got := len(h.got["s1"]); got != 2 {
		t.Errorf("%d intervals delivered, want 2", got)
	}
}

// TestClientResendsAfterReceiverRestart: the receiver dies with intervals
// in the sender's resend buffer (one of them received but not yet
// acknowledged); a new receiver on the same address gets every one of them
// exactly once, minus those its HelloAck says it already has.
func TestClientResendsAfterReceiverRestart(t *testing.T) {
	tests := []struct {
		name         string
		have         []int64 // what the restarted receiver says it already has
		wantSecond   []int64
		wantResentGE uint64 // how many of 4-6 reached the first receiver depends on scheduling: only 3 surely did
	}{
		{"receiver kept interval 3", []int64{3}, []int64{4, 5, 6}, 0},
		{"receiver lost interval 3", nil, []int64{3, 4, 5, 6}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			first := newRecHandler()
			received3 := make(chan struct{})
			kill := make(chan struct{})
			first.onInterval = func(_ string, id int64) error {
				if id == 3 {
					close(received3)
					<-kill // dies before acknowledging
					return errors.New("receiver killed")
				}
				return nil
			}
			_, stop1 := startServer(t, lis, serverConfig(), first, nil, 1<<20)

			c, err := NewClient(clientConfig(addr, "s1"), testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
			defer cancel()
			done := runClient(ctx, c)
			p := testParams()
			for id := int64(1); id <= 6; id++ {
				if err := c.Submit(makeInterval(t, p, id, 100, uint64(id)), testMeta()); err != nil {
					t.Fatal(err)
				}
			}
			<-received3
			testutil.WaitFor(t, "acks of 1 and 2", 3*time.Second, func() bool { return c.Stats().Acked == 2 })
			close(kill)
			stop1()
			if got := first.ids("s1"); !slices.Equal(got, []int64{1, 2}) {
				t.Fatalf("first receiver recorded %v, want [1 2]", got)
			}

			lis2, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("re-listening on %s: %v", addr, err)
			}
			second := newRecHandler()
			second.have = tc.have
			startServer(t, lis2, serverConfig(), second, nil, 1<<20)
			c.Close()
			if err := waitErr(t, done, 8*time.Second); err != nil {
				t.Fatal(err)
			}
			if got := second.ids("s1"); !slices.Equal(got, tc.wantSecond) {
				t.Errorf("restarted receiver got %v, want %v", got, tc.wantSecond)
			}
			st := c.Stats()
			if st.Buffered != 0 || st.Dropped != 0 || st.Acked != uint64(6-len(tc.have)) || st.Resent < tc.wantResentGE {
				t.Errorf("client stats %+v: want %d acknowledged (the rest the HelloAck said it has), nothing buffered or dropped, >= %d resent", st, 6-len(tc.have), tc.wantResentGE)
			}
		})
	}
}

// TestClientDropsRefusedInterval: an interval the receiver refuses as too
// large is dropped and counted instead of blocking the ones behind it.
func TestClientDropsRefusedInterval(t *testing.T) {
	h := newRecHandler()
	cfg := serverConfig()
	p := testParams()
	small := makeInterval(t, p, 1, 50, 1)
	fr, err := Encode(small, testMeta(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// Room for a small interval, not for a big one.
	cfg.Limits.MaxSketchBytes = int(fr[0].GetStart().TotalBytes) + 64
	big := makeInterval(t, p, 2, 5000, 2)
	addr, _ := startServer(t, nil, cfg, h, nil, 1<<20)
	c, err := NewClient(clientConfig(addr, "s1"), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	done := runClient(ctx, c)
	for _, si := range []*interval.SenderInterval{small, big, makeInterval(t, p, 3, 50, 3)} {
		if err := c.Submit(si, testMeta()); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if err := waitErr(t, done, 8*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := h.ids("s1"); !slices.Equal(got, []int64{1, 3}) {
		t.Errorf("receiver got %v, want [1 3]", got)
	}
	if st := c.Stats(); st.Dropped != 1 || st.Acked != 2 {
		t.Errorf("client stats %+v, want 1 dropped and 2 acknowledged", st)
	}
}

func TestPlaintextOnlyOnLoopback(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:7420", true},
		{"127.0.0.2:7420", true},
		{"[::1]:7420", true},
		{"localhost:7420", true},
		{"192.0.2.1:7420", false},
		{"0.0.0.0:7420", false},
		{"[::]:7420", false},
		{":7420", false},
		{"receiver.example:7420", false},
		{"[::ffff:192.0.2.1]:7420", false},
		{"127.0.0.1", false}, // no port: not a host:port at all
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			if got := IsLoopback(tc.addr); got != tc.ok {
				t.Errorf("IsLoopback(%q) = %v, want %v", tc.addr, got, tc.ok)
			}
			cfg := clientConfig(tc.addr, "s1")
			_, err := NewClient(cfg, testLog(t))
			if tc.ok && err != nil {
				t.Errorf("plaintext to %s refused: %v", tc.addr, err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "sender.tls.plaintext")) {
				t.Errorf("plaintext to %s: err = %v, want a refusal naming sender.tls.plaintext", tc.addr, err)
			}
		})
	}
}

func TestNewClientValidates(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*ClientConfig)
	}{
		{"zero backoff", func(c *ClientConfig) { c.BackoffMin = 0 }},
		{"backoff max below min", func(c *ClientConfig) { c.BackoffMax = c.BackoffMin / 2 }},
		{"zero resend buffer", func(c *ClientConfig) { c.ResendBuffer = 0 }},
		{"zero chunk", func(c *ClientConfig) { c.ChunkBytes = 0 }},
		{"zero timeout", func(c *ClientConfig) { c.RPCTimeout = 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clientConfig("127.0.0.1:1", "s1")
			tc.mutate(&cfg)
			if _, err := NewClient(cfg, testLog(t)); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// lockedBuffer is an io.Writer for a logger shared by goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
