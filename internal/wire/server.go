package wire

import (
	"context"
	"crypto/hmac"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/lds-net/lds/internal/interval"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// Handler is what the receiver does with a stream's content. Calls for one
// sender come from that sender's stream goroutine.
type Handler interface {
	// Connected is called after a valid Hello; it returns the intervals
	// the receiver already has final for this sender (not to be resent).
	Connected(sender string, instance uint64) (have []int64, err error)
	// Interval delivers a Complete or Voided result; it returns once the
	// result is queued (then a Complete one is acknowledged) or with an
	// error that ends the stream.
	Interval(sender string, r *Result) error
	// Disconnected is called when the stream ends, with why.
	Disconnected(sender string, err error)
	// FrameError counts a malformed or refused stream by reason.
	FrameError(sender, reason string)
}

// WindowSource is the receiver's hold windows for one sender
// (interval.WindowPlan): the server forwards every announced window to
// the sender over the stream.
type WindowSource interface {
	Announced(since uint64) ([]interval.Window, uint64, bool, <-chan struct{})
}

// LostHandler is implemented by handlers that ask senders about lost
// packets (docs/protocol.md, "Lost packets"): the server sends what
// Queries yields as LostQuery frames, hands each LostAnswer to
// LostAnswer, and, after the sender's Finished, ends the stream once Done
// is closed (the receiver needs no more answers from it).
type LostHandler interface {
	LostQueries(sender string) (queries <-chan *ldsv1.LostQuery, done <-chan struct{})
	LostAnswer(sender string, a *ldsv1.LostAnswer)
	Finished(sender string)
}

// windowed is implemented by handlers that choose hold windows.
type windowed interface {
	Windows(sender string) WindowSource
}

// ServerConfig says what the receiver accepts.
type ServerConfig struct {
	// Fingerprint is every shared setting but the seed (config.Common.Fingerprint).
	Fingerprint map[string]string
	// Seed is sketch.seed: checked through Hello.seed_proof, never sent.
	Seed    string
	Params  interval.Params
	Limits  Limits
	Senders map[string]bool // allowed sender ids; empty = any (the certificate binding still applies)
	Version string
	// HelloTimeout bounds the wait for Hello after the stream opens (0: DefaultHelloTimeout).
	HelloTimeout time.Duration
	// Now is the receiver's clock for the interval window (MaxSkew); nil
	// disables the window (replay: the captures carry their own time).
	Now func() time.Time
	// MaxSkew is receiver.max_interval_skew: an interval whose start is
	// further than this from Now is refused (not buffered, not matched),
	// acknowledged so that the sender forgets it, and counted.
	MaxSkew time.Duration
	// Refusals counts and logs every sender refused at Hello (nil: only
	// Handler.FrameError counts them).
	Refusals *Refusals
}

// DefaultHelloTimeout is how long a new stream may take to send Hello.
const DefaultHelloTimeout = 10 * time.Second

// Server implements the SketchExchange service.
type Server struct {
	ldsv1.UnimplementedSketchExchangeServer
	cfg ServerConfig
	h   Handler
	log *slog.Logger

	mu     sync.Mutex
	active map[string]*activeStream // sender id -> its current stream
}

// activeStream is one sender's stream that passed Hello.
type activeStream struct {
	replaced chan struct{} // closed when a newer stream of the sender takes over
	done     chan struct{} // closed once the stream's handler calls are over
}

// NewServer makes the service; register it on a grpc.Server.
func NewServer(cfg ServerConfig, h Handler, log *slog.Logger) *Server {
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	return &Server{cfg: cfg, h: h, log: log, active: map[string]*activeStream{}}
}

// DiffFingerprints names, sorted, the keys whose values differ between two
// fingerprints (a key missing on one side differs).
func DiffFingerprints(a, b map[string]string) []string {
	var keys []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// errReplaced ends a stream whose sender opened a newer one.
var errReplaced = errors.New("replaced by a newer stream of the same sender")

// Stream serves one sender: Challenge, Hello (within HelloTimeout), then
// intervals until the stream ends or a newer stream of the same sender
// replaces it.
func (s *Server) Stream(st ldsv1.SketchExchange_StreamServer) error {
	ctx := st.Context()
	challenge := newNonce()
	if err := st.Send(&ldsv1.ReceiverFrame{Body: &ldsv1.ReceiverFrame_Challenge{Challenge: &ldsv1.Challenge{Nonce: challenge}}}); err != nil {
		return err
	}
	// One goroutine reads, so that waiting for a frame can end on a
	// deadline or on a replacement. It ends with the stream, when the
	// handler has returned, sending exactly one error on recvErr: the
	// receive's, or the stream context's.
	frames, recvErr := make(chan *ldsv1.SenderFrame), make(chan error, 1)
	go func() {
		for {
			f, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case frames <- f:
			case <-ctx.Done():
				recvErr <- ctx.Err() // the one send: recvErr never blocks
				return
			}
		}
	}()
	var first *ldsv1.SenderFrame
	t := time.NewTimer(s.cfg.HelloTimeout)
	defer t.Stop()
	select {
	case first = <-frames:
	case err := <-recvErr:
		return err
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-t.C:
		s.h.FrameError("", SenderHelloTimeout)
		s.cfg.Refusals.sender(SenderHelloTimeout, "", "refused a stream that sent no Hello", "peer", peerAddr(ctx), "hello_timeout", s.cfg.HelloTimeout)
		return status.Errorf(codes.DeadlineExceeded, "no Hello within %v of opening the stream", s.cfg.HelloTimeout)
	}
	hello, err := s.checkHello(ctx, first, challenge)
	if err != nil {
		return err
	}
	id := hello.SenderId
	me, err := s.claim(id)
	if err != nil {
		return err
	}
	defer s.release(id, me)
	have, err := s.h.Connected(id, hello.Instance)
	if err != nil {
		s.cfg.Refusals.sender(SenderNotServed, id, "refused a sender: no receiver.senders entry can serve it now",
			"sender", id, "peer", peerAddr(ctx), "err", err)
		return status.Errorf(codes.Unavailable, "sender %q: %v", id, err)
	}
	if err := st.Send(&ldsv1.ReceiverFrame{Body: &ldsv1.ReceiverFrame_HelloAck{HelloAck: &ldsv1.HelloAck{
		ReceiverVersion: s.cfg.Version, Have: have, BoundaryFormat: BoundaryFormat}}}); err != nil {
		s.h.Disconnected(id, err)
		return err
	}
	s.log.Info("sender connected", "sender", id, "version", hello.SoftwareVersion)
	err = s.serve(id, st, frames, recvErr, me.replaced)
	s.h.Disconnected(id, err)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case errors.Is(err, errReplaced):
		s.log.Info("sender opened a new stream: ending its previous one", "sender", id)
		return status.Errorf(codes.Aborted, "sender %q: %v", id, err)
	}
	return err
}

// checkHello checks the first frame: a Hello whose sender id the client
// certificate names, listed in receiver.senders (if any), with the same
// fingerprint and a valid seed proof. A frame error names a sender only
// once its id is established: an id a client merely claims never becomes
// a metric label.
func (s *Server) checkHello(ctx context.Context, first *ldsv1.SenderFrame, challenge []byte) (*ldsv1.Hello, error) {
	addr := peerAddr(ctx)
	refuse := func(reason, label, id string, err error, args ...any) error {
		s.h.FrameError(label, reason)
		s.cfg.Refusals.sender(reason, id, "refused a sender", append([]any{"sender", id, "peer", addr, "err", status.Convert(err).Message()}, args...)...)
		return err
	}
	hello := first.GetHello()
	if hello == nil || first.Seq != 0 {
		return nil, refuse(SenderNoHello, "", "", status.Errorf(codes.InvalidArgument, "the first frame must be Hello with seq 0 (got seq %d, %T)", first.Seq, first.Body))
	}
	id := hello.SenderId
	if id == "" || len(id) > 128 {
		return nil, refuse(SenderBadID, "", "", status.Error(codes.InvalidArgument, "Hello.sender_id must be 1-128 characters"))
	}
	if err := checkIdentity(peerCertificate(ctx), id); err != nil {
		return nil, refuse(SenderIdentityMismatch, "", id, status.Error(codes.PermissionDenied, err.Error()))
	}
	if len(s.cfg.Senders) > 0 && !s.cfg.Senders[id] {
		return nil, refuse(SenderUnknown, "", id, status.Errorf(codes.PermissionDenied, "sender %q is not in receiver.senders", id))
	}
	if len(hello.SeedProof) == 0 || len(hello.Nonce) != NonceBytes {
		return nil, refuse(SenderConfigMismatch, id, id, status.Errorf(codes.FailedPrecondition,
			"sender %q sent no seed proof with a %d-byte nonce (an older lds sender): %v", id, NonceBytes, ErrIncompatible))
	}
	d := DiffFingerprints(s.cfg.Fingerprint, hello.Fingerprint)
	if !hmac.Equal(hello.SeedProof, SeedProof(s.cfg.Seed, challenge, hello.Nonce, id)) {
		d = append(d, "sketch.seed")
		slices.Sort(d)
	}
	if len(d) > 0 {
		diff := describeDiff(d, s.cfg.Fingerprint, hello.Fingerprint)
		return nil, refuse(SenderConfigMismatch, id, id, status.Errorf(codes.FailedPrecondition,
			"configuration of sender %q differs from the receiver's in: %s (both ends must use the same values; %s)", id, strings.Join(d, ", "), diff),
			"differing_keys", strings.Join(d, ","))
	}
	return hello, nil
}

// maxDiffValue bounds a fingerprint value quoted in a refusal: the
// sender's values are what a peer claims.
const maxDiffValue = 64

// describeDiff names each differing key with the receiver's and the
// sender's value ("absent" when one side lacks it); the seed is never
// shown, only said to differ.
func describeDiff(keys []string, rx, snd map[string]string) string {
	val := func(m map[string]string, k string) string {
		v, ok := m[k]
		if !ok {
			return "absent"
		}
		if len(v) > maxDiffValue {
			v = v[:maxDiffValue] + "..."
		}
		return fmt.Sprintf("%q", v)
	}
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if k == "sketch.seed" {
			parts = append(parts, "sketch.seed differs (never shown)")
			continue
		}
		k2 := k
		if len(k2) > maxDiffValue {
			k2 = k2[:maxDiffValue] + "..."
		}
		parts = append(parts, fmt.Sprintf("%s: receiver %s, sender %s", k2, val(rx, k), val(snd, k)))
	}
	if len(parts) > 16 {
		parts = append(parts[:16], fmt.Sprintf("and %d more keys", len(parts)-16))
	}
	return strings.Join(parts, ", ")
}

// claim makes this stream the sender's current one. An earlier stream of
// the same (authenticated) sender is stale, its peer gone or restarted:
// it is ended, and claim waits until its handler calls are over.
func (s *Server) claim(id string) (*activeStream, error) {
	me := &activeStream{replaced: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	old := s.active[id]
	s.active[id] = me
	if old != nil {
		close(old.replaced)
	}
	s.mu.Unlock()
	if old == nil {
		return me, nil
	}
	t := time.NewTimer(s.cfg.HelloTimeout)
	defer t.Stop()
	select {
	case <-old.done:
		return me, nil
	case <-me.replaced:
		close(me.done)
		return nil, status.Errorf(codes.Aborted, "sender %q: %v", id, errReplaced)
	case <-t.C:
		s.release(id, me)
		return nil, status.Errorf(codes.Unavailable, "sender %q: its previous stream did not end within %v", id, s.cfg.HelloTimeout)
	}
}

// release ends this stream's turn as the sender's current one.
func (s *Server) release(id string, me *activeStream) {
	s.mu.Lock()
	if s.active[id] == me {
		delete(s.active, id)
	}
	s.mu.Unlock()
	select {
	case <-me.done:
	default:
		close(me.done)
	}
}

func (s *Server) serve(id string, st ldsv1.SketchExchange_StreamServer, frames <-chan *ldsv1.SenderFrame, recvErr <-chan error, replaced <-chan struct{}) error {
	lim := s.cfg.Limits
	if s.cfg.Now != nil && s.cfg.MaxSkew > 0 {
		lim.InWindow = func(iv int64) bool { return InWindow(iv, s.cfg.Params.T, s.cfg.Now(), s.cfg.MaxSkew) }
	}
	a := NewAssembler(s.cfg.Params, lim)
	var sendMu sync.Mutex // Acks and Windows share the stream
	send := func(f *ldsv1.ReceiverFrame) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(f)
	}
	if w, ok := s.h.(windowed); ok {
		if src := w.Windows(id); src != nil {
			go forwardWindows(st.Context(), src, send)
		}
	}
	lh, _ := s.h.(LostHandler)
	var lostDone, finishedDone <-chan struct{}
	if lh != nil {
		var queries <-chan *ldsv1.LostQuery
		queries, lostDone = lh.LostQueries(id)
		go forwardQueries(st.Context(), queries, send)
	}
	for {
		var f *ldsv1.SenderFrame
		select {
		case <-finishedDone:
			return io.EOF // the receiver needs nothing more from a finished sender
		case f = <-frames:
		case err := <-recvErr:
			return s.recvFailed(id, err)
		case <-replaced:
			return errReplaced
		case <-st.Context().Done():
			// The reader stops handing frames over once the stream is
			// done; a receive error that ended it says why better than
			// the context does (gRPC cancels the stream after refusing a
			// frame over receiver.max_frame_bytes).
			if err := <-recvErr; !errors.Is(err, st.Context().Err()) {
				return s.recvFailed(id, err)
			}
			return status.FromContextError(st.Context().Err()).Err()
		}
		res, err := a.Frame(f)
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				s.h.FrameError(id, "too_large")
				s.log.Warn("frame over the receiver's limits: ending the stream", "sender", id, "err", err)
				return status.Errorf(codes.ResourceExhausted, "sender %q: %v", id, err)
			}
			if errors.Is(err, ErrIncompatible) {
				s.h.FrameError(id, "config_mismatch")
				s.log.Error("sender speaks another protocol version: ending the stream", "sender", id, "err", err)
				return status.Errorf(codes.FailedPrecondition, "sender %q: %v", id, err)
			}
			s.h.FrameError(id, "malformed")
			s.log.Warn("malformed frame: ending the stream", "sender", id, "err", err)
			return status.Errorf(codes.InvalidArgument, "sender %q: malformed frame: %v", id, err)
		}
		if res == nil {
			continue
		}
		if res.Kind == Aside {
			if lh != nil {
				if la := res.Frame.GetLostAnswer(); la != nil {
					lh.LostAnswer(id, la)
				} else {
					lh.Finished(id)
					finishedDone = lostDone
				}
			}
			continue
		}
		if res.Kind == OutOfWindow {
			// Refused without being buffered or matched; acknowledged so
			// that the sender does not resend it forever.
			s.h.FrameError(id, "interval_out_of_window")
			s.log.Warn("refused an interval outside receiver.max_interval_skew of this receiver's clock (is either clock stepped?)",
				"sender", id, "interval", res.ID, "interval_start", time.Unix(0, res.ID*s.cfg.Params.T).UTC(),
				"receiver_clock", s.cfg.Now().UTC(), "max_interval_skew", s.cfg.MaxSkew)
		} else {
			if err := s.h.Interval(id, res); err != nil {
				return status.Errorf(codes.Unavailable, "sender %q: %v", id, err)
			}
			if res.Kind == Voided {
				continue // not acknowledged: the sender resends it after a reconnect
			}
		}
		ackID := res.ID
		if err := send(&ldsv1.ReceiverFrame{Body: &ldsv1.ReceiverFrame_Ack{Ack: &ldsv1.Ack{Interval: ackID}}}); err != nil {
			return err
		}
	}
}

// recvFailed counts and logs a receive that failed on the sender's frame
// (one over receiver.max_frame_bytes: gRPC refuses it before decoding).
func (s *Server) recvFailed(id string, err error) error {
	if status.Code(err) == codes.ResourceExhausted {
		s.h.FrameError(id, "too_large")
		s.log.Warn("frame over receiver.max_frame_bytes: ending the stream (the sender's sender.chunk_bytes must be below it)",
			"sender", id, "err", err)
	}
	return err
}

// forwardWindows sends the recent windows, then every new one, until the
// stream ends.
func forwardWindows(ctx context.Context, src WindowSource, send func(*ldsv1.ReceiverFrame) error) {
	var seq uint64
	for {
		ws, next, _, wake := src.Announced(seq)
		seq = next
		for _, w := range ws {
			if err := send(&ldsv1.ReceiverFrame{Body: &ldsv1.ReceiverFrame_Window{Window: &ldsv1.Window{Boundary: w.Boundary, WindowNs: w.W}}}); err != nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
	}
}

// forwardQueries sends the receiver's questions about lost packets until
// the stream ends.
func forwardQueries(ctx context.Context, queries <-chan *ldsv1.LostQuery, send func(*ldsv1.ReceiverFrame) error) {
	if queries == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-queries:
			if err := send(&ldsv1.ReceiverFrame{Body: &ldsv1.ReceiverFrame_LostQuery{LostQuery: q}}); err != nil {
				return
			}
		}
	}
}

// InWindow reports whether interval id (of length t ns) starts within
// maxSkew of now, or ends within it: [now - maxSkew - t, now + maxSkew].
func InWindow(id, t int64, now time.Time, maxSkew time.Duration) bool {
	n, k := now.UnixNano(), int64(maxSkew)
	// id*t would overflow for hostile ids: compare in interval units.
	lo, hi := (n-k)/t-1, (n+k)/t
	return id >= lo && id <= hi
}

// ServerOptions builds the grpc.Server options: credentials, frame limit,
// at most MaxStreamsPerConn streams on one connection, a handshake
// deadline (DefaultHandshakeTimeout; a Gate sets its own), connections without a stream closed after MaxConnIdle, and the
// keepalive pings accepted from senders (at most one per 10 s: a sender's
// sender.keepalive must be >= 10s; more frequent pings end the connection).
func ServerOptions(creds credentials.TransportCredentials, maxFrame int) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxFrame),
		grpc.MaxConcurrentStreams(MaxStreamsPerConn),
		grpc.ConnectionTimeout(DefaultHandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: MaxConnIdle}),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	return opts
}

// MaxStreamsPerConn bounds the streams of one connection: a sender uses
// one at a time (a reconnect's new stream may briefly overlap the old).
const MaxStreamsPerConn = 4

// MaxConnIdle closes a connection that has had no stream this long.
const MaxConnIdle = 2 * time.Minute

// ServerTLS loads mTLS credentials: the receiver's certificate and the CA
// that signs sender certificates (RequireAndVerifyClientCert).
func ServerTLS(certFile, keyFile, clientCAFile string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("receiver.tls.cert/key: %w", err)
	}
	pool, err := loadPool(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("receiver.tls.client_ca: %w", err)
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}), nil
}

// ClientTLS loads the sender's mTLS credentials.
func ClientTLS(certFile, keyFile, caFile, serverName string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("sender.tls.cert/key: %w", err)
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("sender.tls.ca: %w", err)
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool,
		ServerName: serverName, MinVersion: tls.VersionTLS13}), nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// IsLoopback reports whether a host:port names only loopback addresses, the
// one place plaintext is allowed.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
