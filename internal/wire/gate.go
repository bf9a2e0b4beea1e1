package wire

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultHandshakeTimeout bounds a new connection's TLS handshake (and
// HTTP/2 preface): a sender on any real path completes both in a few round
// trips; an idle socket is closed after this long.
const DefaultHandshakeTimeout = 5 * time.Second

// GateConfig bounds the connections the receiver holds.
type GateConfig struct {
	// MaxAuthenticated caps the connections that completed their
	// handshake (receiver.max_connections). A connection authenticated
	// beyond it is closed (a sender retries with backoff).
	MaxAuthenticated int
	// MaxPending caps the connections still in their handshake, apart
	// from MaxAuthenticated (0: max(2 x MaxAuthenticated, 32)).
	MaxPending int
	// MaxPendingPerSource caps the pending handshakes from one source
	// address (0: max(MaxPending/4, 2)).
	MaxPendingPerSource int
	// HandshakeTimeout bounds a handshake (0: DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	Refusals         *Refusals
}

// Gate keeps unauthenticated sockets from starving authenticated senders.
// Its listener accepts every connection at once (never leaving one in the
// kernel's backlog) into a pool of pending handshakes apart from the
// authenticated cap. When that pool, or one source address's share of
// it, is full, the pending connection (of that source, or of all) that
// has made the least progress is closed to make room: the fewest bytes
// read, then the oldest. A sender's TLS
// ClientHello follows its TCP handshake at once, so an idle socket is
// always evicted before it. A pending connection that does not complete
// its handshake within HandshakeTimeout is closed. Only a completed
// handshake (with mTLS: a certificate the client CA signed) takes one of
// MaxAuthenticated slots. Every refusal is counted and logged (Refusals).
type Gate struct {
	cfg GateConfig

	mu      sync.Mutex
	pending map[*gateConn]struct{}
	bySrc   map[string]int
	authed  int
}

// NewGate makes a gate; see GateConfig for the defaults.
func NewGate(cfg GateConfig) *Gate {
	if cfg.MaxAuthenticated < 1 {
		cfg.MaxAuthenticated = 1
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = max(2*cfg.MaxAuthenticated, 32)
	}
	if cfg.MaxPendingPerSource <= 0 {
		cfg.MaxPendingPerSource = max(cfg.MaxPending/4, 2)
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	return &Gate{cfg: cfg, pending: map[*gateConn]struct{}{}, bySrc: map[string]int{}}
}

// Counts reports the pending and authenticated connections (tests, metrics).
func (g *Gate) Counts() (pending, authenticated int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending), g.authed
}

// Listener wraps lis: its connections go through the gate. On Linux it
// also sets TCP_DEFER_ACCEPT on lis (HandshakeTimeout): a connection that
// sends nothing stays in the kernel until the timeout, and a sender's
// ClientHello brings its connection in at once.
func (g *Gate) Listener(lis net.Listener) (net.Listener, error) {
	if err := deferAccept(lis, g.cfg.HandshakeTimeout); err != nil {
		return nil, fmt.Errorf("setting TCP_DEFER_ACCEPT on %s: %w", lis.Addr(), err)
	}
	return &gateListener{Listener: lis, g: g}, nil
}

// Creds wraps the server's transport credentials (nil: plaintext) so that
// a completed handshake moves its connection from the pending pool to the
// authenticated one. A plaintext connection (loopback only) has no
// handshake: it is "authenticated" once its peer has sent a byte.
func (g *Gate) Creds(inner credentials.TransportCredentials) credentials.TransportCredentials {
	if inner == nil {
		inner = insecure.NewCredentials()
	}
	return &gateCreds{TransportCredentials: inner, g: g}
}

type gateListener struct {
	net.Listener
	g *Gate
}

// Accept takes the next connection into the pending pool, closing the
// oldest pending one if the pool is full.
func (l *gateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &gateConn{Conn: c, g: l.g, src: hostOf(c.RemoteAddr()), since: time.Now()}
	l.g.admit(gc)
	return gc, nil
}

// gateConn is one accepted connection; its state is guarded by Gate.mu.
type gateConn struct {
	net.Conn
	g      *Gate
	src    string
	since  time.Time
	nread  atomic.Int64 // bytes read from the peer
	queued atomic.Int64 // bytes once seen waiting in the receive queue

	state   int // connPending, connAuthed, connGone
	evicted bool
}

const (
	connPending = iota
	connAuthed
	connGone
)

// progress is how far the peer got: bytes read, or seen waiting.
func (c *gateConn) progress() int64 { return max(c.nread.Load(), c.queued.Load()) }

func (c *gateConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.nread.Add(int64(n))
	}
	return n, err
}

func (c *gateConn) Close() error {
	c.g.leave(c)
	return c.Conn.Close()
}

// admit puts c in the pending pool, evicting one pending connection when
// c's source or the pool is full.
func (g *Gate) admit(c *gateConn) {
	g.mu.Lock()
	var victim *gateConn
	var why string
	switch {
	case g.bySrc[c.src] >= g.cfg.MaxPendingPerSource:
		victim, why = g.victim(c.src), "too many pending handshakes from its address"
	case len(g.pending) >= g.cfg.MaxPending:
		victim, why = g.victim(""), "too many pending handshakes"
	}
	if victim != nil {
		g.remove(victim)
		victim.evicted = true
	}
	g.pending[c] = struct{}{}
	g.bySrc[c.src]++
	g.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
		g.cfg.Refusals.connection(RefusedPendingEvicted, "closed a connection before its TLS handshake completed: "+why,
			"peer", victim.RemoteAddr().String(), "bytes_read", victim.nread.Load(), "age", time.Since(victim.since).Round(time.Millisecond),
			"max_pending", g.cfg.MaxPending, "max_pending_per_source", g.cfg.MaxPendingPerSource)
	}
}

// victim is the pending connection (from src; "": any) that has made the
// least progress: the fewest bytes read or seen waiting to be read (its
// handshake goroutine may not have run yet under load), then the oldest.
// Call with g.mu held.
func (g *Gate) victim(src string) *gateConn {
	cands := make([]*gateConn, 0, len(g.pending))
	for c := range g.pending {
		if src == "" || c.src == src {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	byProgress := func(a, b *gateConn) int {
		return cmp.Or(cmp.Compare(a.progress(), b.progress()), a.since.Compare(b.since))
	}
	slices.SortFunc(cands, byProgress)
	// Look at the receive queue of the idle-looking ones, oldest first,
	// until one is idle indeed (one look per eviction under an idle flood).
	for _, c := range cands {
		if c.progress() > 0 {
			break
		}
		if q := queuedBytes(c.Conn); q > 0 {
			c.queued.Store(q)
			continue
		}
		return c
	}
	return slices.MinFunc(cands, byProgress)
}

// remove takes c out of the pending pool. Call with g.mu held.
func (g *Gate) remove(c *gateConn) {
	if _, ok := g.pending[c]; !ok {
		return
	}
	delete(g.pending, c)
	if g.bySrc[c.src]--; g.bySrc[c.src] <= 0 {
		delete(g.bySrc, c.src)
	}
}

// leave forgets a closed connection.
func (g *Gate) leave(c *gateConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch c.state {
	case connPending:
		g.remove(c)
	case connAuthed:
		g.authed--
	}
	c.state = connGone
}

// errGateClosed ends the handshake of a connection closed meanwhile.
var errGateClosed = errors.New("connection closed during its handshake")

// authenticate moves c to the authenticated pool, or refuses it when the
// pool is full (full: true) or c was evicted or closed meanwhile.
func (g *Gate) authenticate(c *gateConn) (full bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.state != connPending || c.evicted {
		return false, errGateClosed
	}
	if g.authed >= g.cfg.MaxAuthenticated {
		return true, fmt.Errorf("receiver.max_connections (%d) authenticated connections are open", g.cfg.MaxAuthenticated)
	}
	g.remove(c)
	c.state = connAuthed
	g.authed++
	return false, nil
}

type gateCreds struct {
	credentials.TransportCredentials
	g *Gate
}

// ServerHandshake runs the inner handshake under the gate's deadline and
// counts its failure, or admits the connection to the authenticated pool.
func (gc *gateCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, ok := raw.(*gateConn)
	if !ok {
		return gc.TransportCredentials.ServerHandshake(raw)
	}
	g := gc.g
	_ = raw.SetDeadline(c.since.Add(g.cfg.HandshakeTimeout))
	var conn net.Conn
	var info credentials.AuthInfo
	var err error
	if gc.Info().SecurityProtocol == "insecure" {
		// Plaintext has no handshake: the connection counts as
		// authenticated only once its peer has spoken (the HTTP/2
		// preface), so that idle local sockets stay in the pending pool.
		conn, err = firstByte(raw)
		if err == nil {
			conn, info, err = gc.TransportCredentials.ServerHandshake(conn)
		}
	} else {
		conn, info, err = gc.TransportCredentials.ServerHandshake(raw)
	}
	if err != nil {
		g.mu.Lock()
		evicted := c.evicted
		g.mu.Unlock()
		if !evicted {
			reason := RefusedHandshakeFailed
			var ne net.Error
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
				reason = RefusedHandshakeTimeout
			}
			g.cfg.Refusals.connection(reason, "refused a connection: its TLS handshake did not complete",
				"peer", raw.RemoteAddr().String(), "handshake_timeout", g.cfg.HandshakeTimeout, "err", err)
		}
		_ = raw.Close()
		return nil, nil, err
	}
	if full, err := g.authenticate(c); err != nil {
		if full {
			g.cfg.Refusals.connection(RefusedMaxConnections, "refused an authenticated connection: "+err.Error()+" (raise receiver.max_connections if every sender needs one)",
				"peer", raw.RemoteAddr().String())
		}
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, info, nil
}

// firstByte waits (under the connection's deadline) for the peer's first
// byte and returns a connection that reads it again first.
func firstByte(c net.Conn) (net.Conn, error) {
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	return &prefixConn{Conn: c, prefix: b}, nil
}

// prefixConn reads prefix before the connection's own bytes.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

func (gc *gateCreds) Clone() credentials.TransportCredentials {
	return &gateCreds{TransportCredentials: gc.TransportCredentials.Clone(), g: gc.g}
}
