package ptp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/facebook/time/ptp/protocol"
)

// seqOffset is where a PTP header keeps its sequenceId (IEEE 1588 Table 35).
const seqOffset = 30

// seqFilter sits between protocol.MgmtClient and the socket and drops
// replies whose sequenceId is not the one just sent. MgmtClient reads one
// datagram per request and does not check it; without this, a reply that
// arrives after its request timed out would be taken as the answer to the
// next request (wrong TLV at best, stale data at worst).
type seqFilter struct {
	rw      io.ReadWriter
	client  *protocol.MgmtClient
	dropped int
}

func (f *seqFilter) Write(b []byte) (int, error) { return f.rw.Write(b) }

func (f *seqFilter) Read(b []byte) (int, error) {
	for {
		n, err := f.rw.Read(b)
		if err != nil {
			return n, err
		}
		// Too-short datagrams go through: the decoder rejects them.
		if n >= seqOffset+2 && binary.BigEndian.Uint16(b[seqOffset:]) != f.client.Sequence {
			f.dropped++
			continue
		}
		return n, nil
	}
}

// mgmtConn is our own connected unixgram socket to ptp4l. ptp4l answers
// to the sender's address, so the client needs a bound path of its own.
type mgmtConn struct {
	conn   *net.UnixConn
	dir    string // holds our bound socket; removed on close
	filter *seqFilter
	client *protocol.MgmtClient
}

// dialMgmt binds the reply socket in a fresh directory under base ("" =
// $TMPDIR) and connects it to ptp4l's socket.
func dialMgmt(socket, base string, domain uint8) (*mgmtConn, error) {
	dir, err := os.MkdirTemp(base, "lds-ptp-")
	if err != nil {
		return nil, fmt.Errorf("creating a directory for the PTP management client socket: %w (set ptp.client_dir, or RuntimeDirectory= in the unit, to a directory this user may write and ptp4l may reach)", err)
	}
	local := filepath.Join(dir, "c.sock")
	if len(local) > maxSunPath {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("PTP client socket path %q is longer than %d bytes: set ptp.client_dir to a shorter directory", local, maxSunPath)
	}
	conn, err := net.DialUnix("unixgram",
		&net.UnixAddr{Name: local, Net: "unixgram"},
		&net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		_ = os.RemoveAll(dir)
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("connecting to ptp4l management socket %s: %w (this user may not write to it: linuxptp before 4.0 makes it root-only; "+
				"the ptp4l@.service drop-in of the lds package (or of make install) hands it to group lds once ptp4l restarts, see docs/ptp.md \"Permissions\")", socket, err)
		}
		return nil, fmt.Errorf("connecting to ptp4l management socket %s: %w (is ptp4l running with uds_address %s?)", socket, err, socket)
	}
	m := &mgmtConn{conn: conn, dir: dir}
	m.client = &protocol.MgmtClient{DomainNumber: domain}
	m.filter = &seqFilter{rw: conn, client: m.client}
	m.client.Connection = m.filter
	return m, nil
}

func (m *mgmtConn) close() error {
	return errors.Join(m.conn.Close(), os.RemoveAll(m.dir))
}

// reply is the decoded content of one poll.
type reply struct {
	ts *protocol.TimeStatusNPTLV
	cd *protocol.CurrentDataSetTLV
	pp *protocol.PortPropertiesNPTLV
}

// setDeadline is how queryAll bounds each request (one read each).
type setDeadline func(time.Time) error

// queryAll asks for the three TLVs, each with its own deadline. Any error
// fails the whole poll: a partial picture must not be judged.
func queryAll(cl *protocol.MgmtClient, deadline setDeadline, timeout time.Duration, ctxDeadline time.Time) (reply, error) {
	var r reply
	steps := []struct {
		name string
		do   func() error
	}{
		{"TIME_STATUS_NP", func() (err error) { r.ts, err = cl.TimeStatusNP(); return err }},
		{"CURRENT_DATA_SET", func() (err error) { r.cd, err = cl.CurrentDataSet(); return err }},
		{"PORT_PROPERTIES_NP", func() (err error) { r.pp, err = cl.PortPropertiesNP(); return err }},
	}
	for _, s := range steps {
		d := time.Now().Add(timeout)
		if !ctxDeadline.IsZero() && ctxDeadline.Before(d) {
			d = ctxDeadline
		}
		if deadline != nil {
			if err := deadline(d); err != nil {
				return r, fmt.Errorf("setting deadline for %s: %w", s.name, err)
			}
		}
		if err := safely(s.do); err != nil {
			return r, fmt.Errorf("GET %s: %w", s.name, err)
		}
	}
	return r, nil
}

// safely turns a panic in the third-party decoder into an error: a bad
// datagram must cost one poll, never the daemon.
func safely(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoding ptp4l reply panicked: %v", p)
		}
	}()
	return f()
}

// offsetTracker decides whether the offset ptp4l reports was measured in
// the current acquisition. Seen with linuxptp 3.1.1: when a port takes a
// master, TIME_STATUS_NP / CURRENT_DATA_SET keep the previous master's
// offset and path delay (or 0 after start) for up to a few Sync intervals,
// while ingress_time already advances, until the first delay measurement.
// A measured offset jitters from Sync to Sync, so the first change of the
// raw offsetFromMaster after the port started measuring proves a new
// measurement; it then stays trusted until the acquisition ends.
type offsetTracker struct {
	active   bool
	gm       string
	first    protocol.TimeInterval
	measured bool
}

// update takes one successful poll's view and returns OffsetMeasured.
func (k *offsetTracker) update(measuring bool, gm string, off protocol.TimeInterval) bool {
	switch {
	case !measuring:
		*k = offsetTracker{}
	case !k.active || k.gm != gm:
		*k = offsetTracker{active: true, gm: gm, first: off}
	case off != k.first:
		k.measured = true
	}
	return k.measured
}

// apply copies a reply into s. now is the poll's local time.
func (r reply) apply(s *Status, k *offsetTracker, now time.Time) {
	s.GrandmasterPresent = r.ts.GMPresent != 0
	s.GrandmasterID = r.ts.GMIdentity.String()
	// Offset and path delay from the same TLV: one snapshot. Taking the
	// offset from TIME_STATUS_NP (asked first) could pair "offset 0, not
	// yet computed" with a path delay measured a moment later.
	s.OffsetNS = nsFromInterval(r.cd.OffsetFromMaster.Nanoseconds())
	if r.ts.IngressTimeNS != s.IngressTimeNS || s.OffsetUpdated.IsZero() {
		s.OffsetUpdated = now
	}
	s.IngressTimeNS = r.ts.IngressTimeNS
	s.MeanPathDelayNS = nsFromInterval(r.cd.MeanPathDelay.Nanoseconds())
	s.StepsRemoved = int(r.cd.StepsRemoved)
	s.PortState = portStateText(r.pp.PortState)
	s.Interface = string(r.pp.Interface)
	measuring := s.GrandmasterPresent && s.IngressTimeNS != 0 && portMeasures(s.PortState, false)
	s.OffsetMeasured = k.update(measuring, s.GrandmasterID, r.cd.OffsetFromMaster)
}

func portStateText(ps protocol.PortState) string {
	if t := ps.String(); t != "" {
		return t
	}
	return fmt.Sprintf("UNKNOWN(%d)", uint8(ps))
}

// nsFromInterval rounds and clamps: TimeInterval saturates at its extremes.
func nsFromInterval(ns float64) int64 {
	switch {
	case math.IsNaN(ns):
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns <= math.MinInt64:
		return math.MinInt64
	}
	return int64(math.Round(ns))
}
