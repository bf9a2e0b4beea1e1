package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// ipfixSink is one exporting process towards one collector: one transport
// session (a connected UDP socket or a TCP connection), one message at a
// time, templates per observation domain (RFC 7011 §8).
type ipfixSink struct {
	cfg   IPFIXConfig
	addr  string
	q     *queue
	m     Metrics
	state stateLog
	log   *slog.Logger
	t     int64 // interval length, ns

	conn    net.Conn
	domains map[uint32]*domainState
	msg     message
	rec     []byte
	now     func() time.Time
}

// domainState is one observation domain within the transport session.
type domainState struct {
	seq          uint32    // data records sent so far (mod 2^32)
	templated    bool      // templates sent in this session
	lastTemplate time.Time // UDP: when they were last sent
	sinceTpl     int       // UDP: messages since
}

func newIPFIXSink(cfg IPFIXConfig, addr string, intervalNS int64, m Metrics, log *slog.Logger) *ipfixSink {
	s := &ipfixSink{cfg: cfg, addr: addr, q: newQueue(cfg.QueueRecords), m: m, log: log, t: intervalNS,
		domains: map[uint32]*domainState{}, msg: message{max: cfg.MaxMessageBytes}, now: time.Now}
	s.state = stateLog{kind: KindIPFIX, name: addr, log: log, m: m}
	return s
}

func (s *ipfixSink) kind() string  { return KindIPFIX }
func (s *ipfixSink) name() string  { return s.addr }
func (s *ipfixSink) queue() *queue { return s.q }

func (s *ipfixSink) run(ctx context.Context, flushBy func() time.Time) {
	defer func() {
		if s.conn != nil {
			_ = s.conn.Close()
		}
	}()
	backoff := s.cfg.ReconnectMin
	for {
		if s.conn == nil {
			if err := s.dial(ctx, time.Time{}); err != nil {
				s.state.fail(err)
				select {
				case <-time.After(backoff):
					backoff = min(2*backoff, s.cfg.ReconnectMax)
					continue
				case <-ctx.Done():
					s.drain(flushBy())
					return
				}
			}
			backoff = s.cfg.ReconnectMin
		}
		b, ok := s.q.take(ctx)
		if !ok {
			s.drain(flushBy())
			return
		}
		s.send(b, time.Time{})
	}
}

// drain sends what is still queued until deadline; the rest is dropped.
func (s *ipfixSink) drain(deadline time.Time) {
	for {
		b, ok := s.q.tryTake()
		if !ok {
			break
		}
		if s.now().After(deadline) {
			s.m.ExportDropped(KindIPFIX, s.addr, DropStop, len(b.flows))
			continue
		}
		if s.conn == nil {
			if err := s.dial(context.Background(), deadline); err != nil {
				s.state.fail(err)
				s.m.ExportDropped(KindIPFIX, s.addr, DropStop, len(b.flows))
				continue
			}
		}
		s.send(b, deadline)
	}
	s.m.ExportQueued(KindIPFIX, s.addr, 0)
}

func (s *ipfixSink) dial(ctx context.Context, deadline time.Time) error {
	d := net.Dialer{Timeout: s.cfg.WriteTimeout, Deadline: deadline}
	c, err := d.DialContext(ctx, s.cfg.Transport, s.addr)
	if err != nil {
		return fmt.Errorf("connect %s %s: %w", s.cfg.Transport, s.addr, err)
	}
	s.conn = c
	for _, d := range s.domains {
		d.templated = false // a new transport session: templates again (and sequence numbers go on per domain)
	}
	return nil
}

// send encodes one batch into messages of at most max_message_bytes and
// writes them; a failed write drops that message's records (counted).
func (s *ipfixSink) send(b batch, deadline time.Time) {
	dom := DomainID(b.sender, s.cfg.ObservationDomains)
	ds := s.domains[dom]
	if ds == nil {
		ds = &domainState{}
		s.domains[dom] = ds
	}
	started := false
	start := func() {
		now := s.now()
		s.msg.reset(dom, uint32(now.Unix()))
		if s.needTemplates(ds, now) {
			s.msg.addTemplates(s.cfg.EnterpriseNumber)
			ds.templated, ds.lastTemplate, ds.sinceTpl = true, now, 0
		}
		started = true
	}
	for i := range b.flows {
		rec, tpl := appendRecord(s.rec[:0], &b.flows[i], s.t)
		s.rec = rec
		if !started {
			start()
		}
		if !s.msg.add(tpl, rec) {
			s.write(ds, deadline)
			start()
			if !s.msg.add(tpl, rec) {
				s.m.ExportDropped(KindIPFIX, s.addr, DropEncode, 1) // larger than a message: cannot happen with validated sizes
			}
		}
	}
	if started {
		s.write(ds, deadline)
	}
	s.m.ExportQueued(KindIPFIX, s.addr, s.q.len())
}

func (s *ipfixSink) needTemplates(ds *domainState, now time.Time) bool {
	if !ds.templated {
		return true
	}
	if s.cfg.Transport == "tcp" {
		return false // once per session on a reliable transport (RFC 7011 §8.3)
	}
	if now.Sub(ds.lastTemplate) >= s.cfg.TemplateRefresh {
		return true
	}
	return s.cfg.TemplateRefreshMessages > 0 && ds.sinceTpl >= s.cfg.TemplateRefreshMessages
}

func (s *ipfixSink) write(ds *domainState, deadline time.Time) {
	n := s.msg.records
	buf := s.msg.finish(ds.seq)
	if s.conn == nil {
		s.m.ExportDropped(KindIPFIX, s.addr, DropSendError, n)
		return
	}
	wd := s.now().Add(s.cfg.WriteTimeout)
	if !deadline.IsZero() && deadline.Before(wd) {
		wd = deadline
	}
	_ = s.conn.SetWriteDeadline(wd)
	_, err := s.conn.Write(buf)
	if err != nil {
		s.m.ExportDropped(KindIPFIX, s.addr, DropSendError, n)
		s.state.fail(err)
		if s.cfg.Transport == "tcp" || !isTransient(err) {
			_ = s.conn.Close()
			s.conn = nil
		}
		ds.templated = false // the failed message may have held them
		return
	}
	ds.seq += uint32(n)
	ds.sinceTpl++
	s.m.ExportSent(KindIPFIX, s.addr, n)
	s.state.ok()
}

// isTransient: a UDP socket reports an ICMP error of an earlier datagram
// (port unreachable) on a later write; the socket stays usable.
func isTransient(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
