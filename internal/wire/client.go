package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lds-net/lds/internal/interval"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// ClientConfig configures the sender's side of the stream.
type ClientConfig struct {
	Addr         string
	Creds        credentials.TransportCredentials // nil = plaintext (loopback only)
	SenderID     string
	Version      string
	Fingerprint  map[string]string // every shared setting but the seed
	Seed         string            // sketch.seed: proven in Hello, never sent
	ResendBuffer int
	BackoffMin   time.Duration
	BackoffMax   time.Duration
	Keepalive    time.Duration
	RPCTimeout   time.Duration
	ChunkBytes   int
	// FailFast ends Run on a refusal (configuration mismatch, unknown
	// sender) instead of retrying: for replay and tests.
	FailFast bool
	// Windows receives the receiver's hold windows (Window frames); it is
	// closed when Run returns. nil: ignored.
	Windows *interval.WindowTable
	// Answer answers the receiver's LostQuery: the encoded packets
	// (AppendLostAnswer) of the asked hashes the sender logged in the
	// interval, or gone when it keeps no log of it. nil: every query is
	// answered gone.
	Answer func(id int64, hashes []uint64) (packets []byte, gone bool)
	// MaxLostQuery bounds the hashes of one LostQuery (the lost-packet
	// table's cells, the most its peel lists): a larger one is answered
	// gone without a lookup.
	MaxLostQuery int
	// WaitFinished: after the last interval is acknowledged, answer
	// queries until the receiver ends the stream (replay), instead of for
	// at most RPCTimeout (a daemon stopping).
	WaitFinished bool
}

// ClientStats are the client's counters (for metrics). BytesSent is the
// protobuf size (proto.Size) of every frame written to a stream, Hello and
// resent intervals included: what the receiver's gRPC layer hands over,
// without gRPC's 5-byte message prefix, HTTP/2 or TLS framing.
type ClientStats struct {
	Sent, Acked, Resent, Dropped, BytesSent uint64
	Buffered                                int
	Connected                               bool
}

type pending struct {
	id     int64
	frames []*ldsv1.SenderFrame
	sent   bool // sent on the current stream
	tries  int
	sentAt time.Time
}

// Client streams finished intervals to the receiver, keeping every
// unacknowledged one in a bounded buffer and resending after a reconnect.
type Client struct {
	cfg      ClientConfig
	log      *slog.Logger
	instance uint64

	mu      sync.Mutex
	buf     []*pending
	answers []*ldsv1.SenderFrame // LostAnswer frames to send
	wake    chan struct{}
	stats   ClientStats
	closed  bool
	drained chan struct{}
}

// NewClient checks cfg and makes a client; Run connects.
func NewClient(cfg ClientConfig, log *slog.Logger) (*Client, error) {
	if cfg.Creds == nil && !IsLoopback(cfg.Addr) {
		return nil, fmt.Errorf("sender.tls.plaintext: refused for %s, which is not a loopback address; configure mTLS", cfg.Addr)
	}
	if cfg.ResendBuffer < 1 || cfg.ChunkBytes < 1 || cfg.RPCTimeout <= 0 {
		return nil, errors.New("wire: resend buffer, chunk size and RPC timeout must be positive")
	}
	if cfg.BackoffMin <= 0 || cfg.BackoffMax < cfg.BackoffMin {
		// Run draws a random wait in [0, backoff): a zero backoff would panic.
		return nil, fmt.Errorf("wire: need 0 < backoff_min <= backoff_max (got %v, %v)", cfg.BackoffMin, cfg.BackoffMax)
	}
	return &Client{cfg: cfg, log: log, instance: rand.Uint64(), wake: make(chan struct{}, 1), drained: make(chan struct{})}, nil
}

// Submit queues a finished interval without ever blocking capture; when the
// buffer is full the oldest interval is dropped and counted.
func (c *Client) Submit(si *interval.SenderInterval, meta interval.SenderMeta) error {
	frames, err := Encode(si, meta, c.cfg.ChunkBytes)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if len(c.buf) >= c.cfg.ResendBuffer {
		c.log.Warn("resend buffer full: dropping the oldest unacknowledged interval", "interval", c.buf[0].id, "buffer", c.cfg.ResendBuffer)
		c.buf = c.buf[1:]
		c.stats.Dropped++
	}
	c.buf = append(c.buf, &pending{id: si.ID, frames: frames})
	c.stats.Buffered = len(c.buf)
	c.mu.Unlock()
	c.poke()
	return nil
}

// Close says no more intervals will be submitted; Run returns once the
// buffer is acknowledged (or its context ends).
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.poke()
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() ClientStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run connects and streams until ctx ends, or, after Close, until every
// interval is acknowledged.
func (c *Client) Run(ctx context.Context) error {
	defer c.cfg.Windows.Close() // builders waiting for a window stop waiting
	creds := c.cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(c.cfg.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: c.cfg.Keepalive, Timeout: c.cfg.RPCTimeout, PermitWithoutStream: true}))
	if err != nil {
		return fmt.Errorf("sender.receiver %q: %w", c.cfg.Addr, err)
	}
	defer func() { _ = conn.Close() }()
	client := ldsv1.NewSketchExchangeClient(conn)
	backoff := c.cfg.BackoffMin
	for {
		done, err := c.session(ctx, client)
		if done {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if st, ok := status.FromError(err); ok && refusal(st.Code()) {
			c.log.Error("receiver refused this sender", "receiver", c.cfg.Addr, "err", st.Message())
			if c.cfg.FailFast {
				return fmt.Errorf("receiver %s refused the stream: %s", c.cfg.Addr, st.Message())
			}
		} else {
			c.log.Warn("stream to receiver ended; reconnecting", "receiver", c.cfg.Addr, "err", err, "backoff", backoff)
		}
		// Full jitter: spread reconnecting senders apart.
		wait := time.Duration(rand.Int64N(int64(backoff))) + backoff/2
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, c.cfg.BackoffMax)
		if err == nil {
			backoff = c.cfg.BackoffMin
		}
	}
}

// handshake reads the receiver's Challenge, sends Hello with the seed
// proof, and reads HelloAck, all within the RPC timeout.
func (c *Client) handshake(st ldsv1.SketchExchange_StreamClient) (*ldsv1.HelloAck, error) {
	type reply struct {
		f   *ldsv1.ReceiverFrame
		err error
	}
	ch := make(chan reply, 1)
	recv := func() { f, err := st.Recv(); ch <- reply{f, err} }
	timeout := time.NewTimer(c.cfg.RPCTimeout)
	defer timeout.Stop()
	wait := func(what string) (*ldsv1.ReceiverFrame, error) {
		go recv()
		select {
		case r := <-ch:
			return r.f, r.err
		case <-timeout.C:
			return nil, fmt.Errorf("no %s from %s within %v", what, c.cfg.Addr, c.cfg.RPCTimeout)
		}
	}
	f, err := wait("Challenge")
	if err != nil {
		if status.Code(err) == codes.Unknown {
			// An older receiver waits for Hello and never challenges; a
			// busy one may only be slow: retried, with the hint.
			err = fmt.Errorf("%w: a busy receiver, or an older lds receiver, which sends none (it waits for Hello; %w)", err, ErrIncompatible)
		}
		return nil, err
	}
	chal := f.GetChallenge()
	if chal == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "receiver %s sent no Challenge before %T (an older lds receiver): %v", c.cfg.Addr, f.Body, ErrIncompatible)
	}
	nonce := newNonce()
	hello := &ldsv1.SenderFrame{Seq: 0, Body: &ldsv1.SenderFrame_Hello{Hello: &ldsv1.Hello{
		SenderId: c.cfg.SenderID, SoftwareVersion: c.cfg.Version, Fingerprint: c.cfg.Fingerprint, Instance: c.instance,
		Nonce: nonce, SeedProof: SeedProof(c.cfg.Seed, chal.Nonce, nonce, c.cfg.SenderID)}}}
	if err := st.Send(hello); err != nil {
		return nil, err
	}
	c.sentBytes(hello)
	if f, err = wait("HelloAck"); err != nil {
		return nil, err
	}
	ack := f.GetHelloAck()
	if ack == nil {
		return nil, errors.New("receiver answered Hello without HelloAck")
	}
	return ack, nil
}

func refusal(code codes.Code) bool {
	return code == codes.FailedPrecondition || code == codes.PermissionDenied || code == codes.Unauthenticated
}

// session runs one stream; done=true when closed and fully acknowledged.
func (c *Client) session(ctx context.Context, client ldsv1.SketchExchangeClient) (bool, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.Stream(sctx)
	if err != nil {
		return false, err
	}
	ack, err := c.handshake(st)
	if err != nil {
		return false, err
	}
	if ack.BoundaryFormat != BoundaryFormat {
		// An older receiver would refuse (or worse, misread) every
		// interval: stop here with a refusal that says why.
		got := ack.BoundaryFormat
		if got == "" {
			got = "none (an older lds: the 40-bit hash list)"
		}
		return false, status.Errorf(codes.FailedPrecondition, "receiver %s (version %q) reads boundary format %s, this sender writes %s: %v",
			c.cfg.Addr, ack.ReceiverVersion, got, BoundaryFormat, ErrIncompatible)
	}
	c.mu.Lock()
	have := map[int64]bool{}
	for _, id := range ack.Have {
		have[id] = true
	}
	kept := c.buf[:0]
	for _, p := range c.buf {
		if !have[p.id] {
			if p.sent || p.tries > 0 {
				c.stats.Resent++
			}
			p.sent = false
			kept = append(kept, p)
		}
	}
	c.buf = kept
	c.stats.Buffered = len(c.buf)
	c.stats.Connected = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.stats.Connected = false
		c.mu.Unlock()
	}()

	recvErr := make(chan error, 1)
	go func() {
		for {
			f, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if a := f.GetAck(); a != nil {
				c.ack(a.Interval)
			}
			if w := f.GetWindow(); w != nil && w.WindowNs > 0 {
				c.cfg.Windows.Set(interval.Window{Boundary: w.Boundary, W: w.WindowNs})
			}
			if q := f.GetLostQuery(); q != nil {
				c.answer(q)
			}
		}
	}()
	tick := time.NewTicker(c.cfg.RPCTimeout / 4)
	defer tick.Stop()
	seq := uint64(0)
	sendFrame := func(f *ldsv1.SenderFrame) error {
		seq++
		f.Seq = seq
		if err := st.Send(f); err != nil {
			// Send says only io.EOF when the receiver ended the
			// stream; its status comes from Recv.
			if errors.Is(err, io.EOF) {
				select {
				case err = <-recvErr:
					c.refused(err)
				case <-time.After(c.cfg.RPCTimeout):
				}
			}
			return err
		}
		c.sentBytes(f)
		return nil
	}
	for {
		if err := c.sendAnswers(sendFrame); err != nil {
			return false, err
		}
		// Send everything not yet sent on this stream, oldest first.
		for {
			p := c.nextUnsent()
			if p == nil {
				break
			}
			for _, f := range p.frames {
				if err := sendFrame(f); err != nil {
					return false, err
				}
			}
			c.mu.Lock()
			c.stats.Sent++
			c.mu.Unlock()
		}
		c.mu.Lock()
		finished := c.closed && len(c.buf) == 0
		var overdue *pending
		for _, p := range c.buf {
			if p.sent && time.Since(p.sentAt) > c.cfg.RPCTimeout {
				overdue = p
				break
			}
		}
		c.mu.Unlock()
		if finished {
			c.finish(sendFrame, recvErr)
			_ = st.CloseSend()
			// Wait for the receiver to end the stream: it has then read
			// our end of it. Cancelling at once (the deferred cancel) can
			// reach it first, and a busy receiver then reads a broken
			// stream instead of a finished one (and a replay waits for
			// the sender's end forever).
			select {
			case <-recvErr: //nolint:errcheck // the stream's end is what is waited for; its status changes nothing here
			case <-time.After(c.cfg.RPCTimeout):
			}
			return true, nil
		}
		if overdue != nil {
			return false, fmt.Errorf("interval %d not acknowledged within %v", overdue.id, c.cfg.RPCTimeout)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case err := <-recvErr:
			c.refused(err)
			return false, err
		case <-c.wake:
		case <-tick.C:
		}
	}
}

// finish tells the receiver no more intervals come and answers its
// questions about lost packets until it ends the stream: for at most
// RPCTimeout, or, with WaitFinished (replay), as long as it takes.
func (c *Client) finish(sendFrame func(*ldsv1.SenderFrame) error, recvErr chan error) {
	if err := sendFrame(&ldsv1.SenderFrame{Body: &ldsv1.SenderFrame_Finished{Finished: &ldsv1.Finished{}}}); err != nil {
		return
	}
	var deadline <-chan time.Time
	if !c.cfg.WaitFinished {
		t := time.NewTimer(c.cfg.RPCTimeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		select {
		case err := <-recvErr:
			recvErr <- err // the caller waits for the stream's end too
			return
		case <-deadline:
			return
		case <-c.wake:
			if c.sendAnswers(sendFrame) != nil {
				return
			}
		}
	}
}

// answer looks up a LostQuery's hashes (on the stream's reading
// goroutine) and queues the answer for the sending one.
func (c *Client) answer(q *ldsv1.LostQuery) {
	a := &ldsv1.LostAnswer{Interval: q.Interval, Gone: true}
	if c.cfg.Answer != nil && len(q.Hashes) <= c.cfg.MaxLostQuery {
		a.Packets, a.Gone = c.cfg.Answer(q.Interval, q.Hashes)
	}
	c.mu.Lock()
	if len(c.answers) < maxQueuedAnswers {
		c.answers = append(c.answers, &ldsv1.SenderFrame{Body: &ldsv1.SenderFrame_LostAnswer{LostAnswer: a}})
	}
	c.mu.Unlock()
	c.poke()
}

// maxQueuedAnswers bounds the answers waiting to be sent (a receiver
// asks once an interval; more pile up only on a stalled stream, and the
// receiver stops waiting for them anyway).
const maxQueuedAnswers = 64

// sendAnswers sends the queued answers.
func (c *Client) sendAnswers(sendFrame func(*ldsv1.SenderFrame) error) error {
	c.mu.Lock()
	as := c.answers
	c.answers = nil
	c.mu.Unlock()
	for _, f := range as {
		if err := sendFrame(f); err != nil {
			return err
		}
	}
	return nil
}

// refused drops the interval the receiver refused as malformed or too
// large. Resending it would fail the same way on every reconnect, and each
// time the intervals queued behind it would wait: a poison pill. The
// receiver acknowledges in order and its Acks precede the status, so the
// refused interval is the oldest one sent on this stream and not acknowledged.
func (c *Client) refused(err error) {
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.InvalidArgument && st.Code() != codes.ResourceExhausted) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.buf {
		if p.sent {
			c.log.Error("receiver refused an interval: dropping it instead of resending it forever",
				"interval", p.id, "code", st.Code().String(), "err", st.Message())
			c.buf = append(c.buf[:i], c.buf[i+1:]...)
			c.stats.Dropped++
			c.stats.Buffered = len(c.buf)
			return
		}
	}
}

// sentBytes counts a frame written to the stream.
func (c *Client) sentBytes(f *ldsv1.SenderFrame) {
	n := uint64(proto.Size(f))
	c.mu.Lock()
	c.stats.BytesSent += n
	c.mu.Unlock()
}

func (c *Client) nextUnsent() *pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.buf {
		if !p.sent {
			p.sent, p.sentAt = true, time.Now()
			p.tries++
			return p
		}
	}
	return nil
}

func (c *Client) ack(id int64) {
	c.mu.Lock()
	for i, p := range c.buf {
		if p.id == id {
			c.buf = append(c.buf[:i], c.buf[i+1:]...)
			c.stats.Acked++
			break
		}
	}
	c.stats.Buffered = len(c.buf)
	c.mu.Unlock()
	c.poke()
}
