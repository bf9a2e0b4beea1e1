package wire

import (
	"context"
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
	// Interval delivers a complete interval; it returns once the interval
	// is queued (then it is acknowledged) or with an error that ends the stream.
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

// windowed is implemented by handlers that choose hold windows.
type windowed interface {
	Windows(sender string) WindowSource
}

// ServerConfig says what the receiver accepts.
type ServerConfig struct {
	Fingerprint map[string]string
	Params      interval.Params
	Limits      Limits
	Senders     map[string]bool // allowed sender ids; empty = any
	Version     string
}

// Server implements the SketchExchange service.
type Server struct {
	ldsv1.UnimplementedSketchExchangeServer
	cfg ServerConfig
	h   Handler
	log *slog.Logger
}

// NewServer makes the service; register it on a grpc.Server.
func NewServer(cfg ServerConfig, h Handler, log *slog.Logger) *Server {
	return &Server{cfg: cfg, h: h, log: log}
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

// Stream serves one sender.
func (s *Server) Stream(st ldsv1.SketchExchange_StreamServer) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil || first.Seq != 0 {
		s.h.FrameError("", "no_hello")
		return status.Errorf(codes.InvalidArgument, "the first frame must be Hello with seq 0 (got seq %d, %T)", first.Seq, first.Body)
	}
	id := hello.SenderId
	if id == "" || len(id) > 128 {
		s.h.FrameError("", "bad_sender_id")
		return status.Error(codes.InvalidArgument, "Hello.sender_id must be 1-128 characters")
	}
	if len(s.cfg.Senders) > 0 && !s.cfg.Senders[id] {
		s.h.FrameError(id, "unknown_sender")
		return status.Errorf(codes.PermissionDenied, "sender %q is not in receiver.senders", id)
	}
	if d := DiffFingerprints(s.cfg.Fingerprint, hello.Fingerprint); len(d) > 0 {
		s.h.FrameError(id, "config_mismatch")
		return status.Errorf(codes.FailedPrecondition, "configuration of sender %q differs from the receiver's in: %s (both ends must use the same values)", id, strings.Join(d, ", "))
	}
	have, err := s.h.Connected(id, hello.Instance)
	if err != nil {
		return status.Errorf(codes.Unavailable, "sender %q: %v", id, err)
	}
	if err := st.Send(&ldsv1.ReceiverFrame{Body: &ldsv1.ReceiverFrame_HelloAck{HelloAck: &ldsv1.HelloAck{
		ReceiverVersion: s.cfg.Version, Have: have, BoundaryFormat: BoundaryFormat}}}); err != nil {
		s.h.Disconnected(id, err)
		return err
	}
	s.log.Info("sender connected", "sender", id, "version", hello.SoftwareVersion)
	err = s.serve(id, st)
	s.h.Disconnected(id, err)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (s *Server) serve(id string, st ldsv1.SketchExchange_StreamServer) error {
	a := NewAssembler(s.cfg.Params, s.cfg.Limits)
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
	for {
		f, err := st.Recv()
		if err != nil {
			return err
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
		if err := s.h.Interval(id, res); err != nil {
			return status.Errorf(codes.Unavailable, "sender %q: %v", id, err)
		}
		if res.VoidedOK {
			continue // not acknowledged: the sender resends it after a reconnect
		}
		if err := send(&ldsv1.ReceiverFrame{Body: &ldsv1.ReceiverFrame_Ack{Ack: &ldsv1.Ack{Interval: res.Interval.ID}}}); err != nil {
			return err
		}
	}
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

// ServerOptions builds the grpc.Server options: credentials, frame limit,
// keepalive accepted from senders.
func ServerOptions(creds credentials.TransportCredentials, maxFrame int) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxFrame),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	return opts
}

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
