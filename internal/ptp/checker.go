package ptp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// Checker polls ptp4l and keeps the latest Status.
type Checker struct {
	cfg Config
	log *slog.Logger
	dir string // where the reply socket goes (clientDir)

	pollMu sync.Mutex // one poll at a time: they share one socket
	conn   *mgmtConn
	track  offsetTracker // guarded by pollMu

	mu     sync.Mutex
	st     Status
	warned bool // an outage has been reported; cleared on recovery
}

// New validates cfg; it does not touch the socket (Poll and Run do).
func New(cfg Config, log *slog.Logger) (*Checker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid PTP configuration: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Checker{cfg: cfg, log: log.With("component", "ptp"), dir: clientDir(cfg.ClientDir, os.Getenv)}
	c.st.State = Judge(c.st, cfg, time.Now())
	return c, nil
}

// Status returns the latest poll's result judged now, so that a grace
// period expires even between polls. Safe for concurrent use.
func (c *Checker) Status() Status {
	return c.statusAt(time.Now())
}

func (c *Checker) statusAt(now time.Time) Status {
	c.mu.Lock()
	s := c.st
	c.mu.Unlock()
	s.State = Judge(s, c.cfg, now)
	return s
}

// Poll queries ptp4l once (TIME_STATUS_NP, CURRENT_DATA_SET,
// PORT_PROPERTIES_NP, each with cfg.Timeout) and returns the new Status.
// The error is the poll's failure, also recorded in Status.Err; a failed
// poll keeps the previous answer (Judge decides how long it counts).
func (c *Checker) Poll(ctx context.Context) (Status, error) {
	if !c.cfg.Enabled {
		return c.Status(), nil
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()

	r, err := c.query(ctx)
	now := time.Now()
	if err != nil && ctx.Err() != nil {
		// Our caller gave up (shutdown): says nothing about ptp4l.
		return c.statusAt(now), err
	}
	c.mu.Lock()
	if err != nil {
		c.st.Reachable = false
		c.st.Err = err.Error()
	} else {
		r.apply(&c.st, &c.track, now)
		c.readPHC(&c.st)
		c.st.Reachable = true
		c.st.LastOK = now
		c.st.Err = ""
	}
	warn, recovered := false, false
	if err != nil && !c.warned {
		c.warned, warn = true, true
	} else if err == nil && c.warned {
		c.warned, recovered = false, true
	}
	c.mu.Unlock()

	if warn {
		c.log.Warn("cannot read clock status from ptp4l; clock sync state stays unknown/unsynced until it answers"+
			" (start ptp4l with uds_address set to this socket, fix ptp.socket, or set ptp.enabled: false to run without PTP)",
			"socket", c.cfg.Socket, "err", err)
	}
	if recovered {
		c.log.Info("ptp4l answers again", "socket", c.cfg.Socket)
	}
	return c.statusAt(now), err
}

func (c *Checker) query(ctx context.Context) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("polling ptp4l at %s: %w", c.cfg.Socket, err)
	}
	if c.conn == nil {
		m, err := dialMgmt(c.cfg.Socket, c.dir, c.cfg.Domain)
		if err != nil {
			return reply{}, err
		}
		c.conn = m
		// A new connection may mean a restarted ptp4l, whose offset must
		// prove itself again (see offsetTracker).
		c.track = offsetTracker{}
	}
	conn := c.conn
	// Cancelling ctx interrupts a read in progress.
	stop := context.AfterFunc(ctx, func() { _ = conn.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	ctxDeadline, _ := ctx.Deadline()
	r, err := queryAll(conn.client, conn.conn.SetDeadline, c.cfg.Timeout, ctxDeadline)
	if err != nil {
		// Redial next time unless the socket merely timed out: a broken
		// one means ptp4l went away or restarted (new socket). Late
		// replies on a kept socket are dropped by seqFilter.
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			_ = c.closeConnLocked()
		}
		if ctx.Err() != nil {
			err = errors.Join(ctx.Err(), err)
		}
		return reply{}, fmt.Errorf("polling ptp4l at %s: %w", c.cfg.Socket, err)
	}
	return r, nil
}

func (c *Checker) closeConnLocked() error {
	if c.conn == nil {
		return nil
	}
	err := c.conn.close()
	c.conn = nil
	return err
}

// Close releases the client socket. Run calls it on return; call it
// yourself if you only use Poll.
func (c *Checker) Close() error {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	return c.closeConnLocked()
}

// Run polls every cfg.PollInterval until ctx is done and returns nil then.
// ptp4l being absent is not an error: it is warned about once per outage
// and shows as State "unknown" (never answered) or "unsynced".
func (c *Checker) Run(ctx context.Context) error {
	defer func() { _ = c.Close() }()
	if !c.cfg.Enabled {
		c.log.Info("PTP checking disabled (ptp.enabled: false); clock status reported as disabled")
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(c.cfg.PollInterval)
	defer t.Stop()
	var last State
	for {
		s, _ := c.Poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if s.State != last {
			lvl := slog.LevelInfo
			if s.State == StateUnsynced {
				lvl = slog.LevelWarn
			}
			c.log.Log(ctx, lvl, "PTP clock state changed", "from", string(last), "to", string(s.State),
				"port_state", s.PortState, "grandmaster", s.GrandmasterID, "offset_ns", s.OffsetNS, "err", s.Err)
			last = s.State
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
