package wire

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
)

// Reasons a connection is refused before a stream can open
// (lds_connection_refusals_total{reason}): a fixed set.
const (
	// RefusedHandshakeTimeout: the TLS handshake did not complete within
	// the handshake deadline (an idle or slow socket).
	RefusedHandshakeTimeout = "handshake_timeout"
	// RefusedHandshakeFailed: the TLS handshake failed (no or a bad client
	// certificate, not TLS, or the peer closed it).
	RefusedHandshakeFailed = "handshake_failed"
	// RefusedPendingEvicted: closed before its handshake completed to make
	// room for a newer connection (too many handshakes pending in all or
	// from its address).
	RefusedPendingEvicted = "pending_evicted"
	// RefusedMaxConnections: authenticated, but receiver.max_connections
	// authenticated connections are already open.
	RefusedMaxConnections = "max_connections"
)

// ConnectionRefusalReasons lists every connection refusal reason.
func ConnectionRefusalReasons() []string {
	return []string{RefusedHandshakeTimeout, RefusedHandshakeFailed, RefusedPendingEvicted, RefusedMaxConnections}
}

// Reasons a sender's stream is refused at Hello (lds_sender_refusals_total{reason}).
const (
	SenderHelloTimeout     = "hello_timeout"
	SenderNoHello          = "no_hello"
	SenderBadID            = "bad_sender_id"
	SenderIdentityMismatch = "identity_mismatch"
	SenderUnknown          = "unknown_sender"
	SenderConfigMismatch   = "config_mismatch"
	// SenderNotServed: the id passed every check but no receiver.senders
	// entry can serve it now (the wildcard entry is bound to another
	// sender, or the sender is already connected).
	SenderNotServed = "not_served"
)

// SenderRefusalReasons lists every sender refusal reason.
func SenderRefusalReasons() []string {
	return []string{SenderHelloTimeout, SenderNoHello, SenderBadID, SenderIdentityMismatch, SenderUnknown, SenderConfigMismatch, SenderNotServed}
}

// Refusals is where the receiver's network side reports what it refuses:
// each refusal is counted by reason and logged at WARN through one
// rate-limited log, so that a flood of refusals costs a few lines a minute,
// never a line per connection. A nil *Refusals (or nil fields) drops them.
type Refusals struct {
	Log *LimitedLog
	// Connection counts a connection refused before a stream could open.
	Connection func(reason string)
	// Sender counts a sender's stream refused at Hello.
	Sender func(reason string)
}

func (r *Refusals) connection(reason, msg string, args ...any) {
	if r == nil {
		return
	}
	if r.Connection != nil {
		r.Connection(reason)
	}
	r.Log.Warn(reason, msg, append([]any{"reason", reason}, args...)...)
}

// sender counts and logs a refused sender; key separates the log's rate
// limit per claimed sender id within the reason.
func (r *Refusals) sender(reason, id, msg string, args ...any) {
	if r == nil {
		return
	}
	if r.Sender != nil {
		r.Sender(reason)
	}
	r.Log.Warn(reason+"\x00"+id, msg, append([]any{"reason", reason}, args...)...)
}

// DefaultLogEvery is how often a LimitedLog logs one key at most.
const DefaultLogEvery = 10 * time.Second

// maxLogKeys bounds the keys a LimitedLog remembers: keys come from what
// peers claim, so more keys share one line.
const maxLogKeys = 256

// LimitedLog logs at most one line per key per Every; each line
// says how many lines of its key were held back since the previous one.
// Safe for concurrent use; a nil *LimitedLog logs nothing.
type LimitedLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*limitState
}

type limitState struct {
	last       time.Time
	suppressed int
}

// NewLimitedLog makes a rate-limited log (every <= 0: DefaultLogEvery).
func NewLimitedLog(log *slog.Logger, every time.Duration) *LimitedLog {
	if every <= 0 {
		every = DefaultLogEvery
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LimitedLog{log: log, every: every, now: time.Now, keys: map[string]*limitState{}}
}

// Warn logs msg with args at WARN unless a line of key was logged less
// than Every ago.
func (l *LimitedLog) Warn(key, msg string, args ...any) { l.emit(slog.LevelWarn, key, msg, args) }

// Error is Warn at ERROR.
func (l *LimitedLog) Error(key, msg string, args ...any) { l.emit(slog.LevelError, key, msg, args) }

func (l *LimitedLog) emit(level slog.Level, key, msg string, args []any) {
	if l == nil {
		return
	}
	now := l.now()
	l.mu.Lock()
	st := l.keys[key]
	if st == nil {
		if len(l.keys) >= maxLogKeys {
			for k, s := range l.keys {
				if now.Sub(s.last) >= l.every && s.suppressed == 0 {
					delete(l.keys, k)
				}
			}
		}
		if len(l.keys) >= maxLogKeys {
			key = "\x00overflow"
			st = l.keys[key]
		}
		if st == nil {
			st = &limitState{}
			l.keys[key] = st
		}
	}
	if !st.last.IsZero() && now.Sub(st.last) < l.every {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	held := st.suppressed
	st.last, st.suppressed = now, 0
	l.mu.Unlock()
	if held > 0 {
		args = append(args, "similar_lines_held_back", held)
	}
	l.log.Log(context.Background(), level, msg, args...)
}

// peerAddr is the address of a stream's peer ("" when unknown).
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// hostOf is the host part of an address (the whole string if it has no port).
func hostOf(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	s := addr.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}
