package capture

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
)

// ErrTimeout is returned by a live Source (and Reader.Next) when no packet
// arrived within source.poll_timeout: not an error, a chance for the caller
// to look at its context and the wall clock. Test with errors.Is.
var ErrTimeout = errors.New("capture: no packet within the poll timeout")

// DropStats are cumulative drop counters of a source since it was opened.
type DropStats struct {
	Received  uint64 // packets that reached this socket, dropped ones included (TPACKET tp_packets, like tcpdump's "received by filter"); 0 where unknown
	Kernel    uint64 // dropped by the kernel: ring or buffer full
	Interface uint64 // dropped by the interface/driver (rx_dropped + rx_missed_errors)
	// Oversize counts frames longer than the interface MTU plus the link
	// header: packets coalesced before the capture (GRO, LRO). They are
	// measured like any frame, not dropped.
	Oversize uint64
	// LinkDowns counts the capture interface's outages (down, no carrier
	// or missing, including at open); Link is its state now. Live
	// interface sources only (one worker of a fanout group reports them).
	LinkDowns uint64
	Link      LinkState
}

// LinkState is a capture interface's state as a source last saw it.
type LinkState uint8

// Link states; LinkUnknown for sources without an interface (files).
const (
	LinkUnknown LinkState = iota
	LinkUp
	LinkDown
)

// Sub returns d - prev: the drops of one interval from two cumulative
// reads. Link is d's.
func (d DropStats) Sub(prev DropStats) DropStats {
	return DropStats{d.Received - prev.Received, d.Kernel - prev.Kernel, d.Interface - prev.Interface,
		d.Oversize - prev.Oversize, d.LinkDowns - prev.LinkDowns, d.Link}
}

// Add returns the sum (to total the workers); Link is the state of the
// one that knows it (down wins).
func (d DropStats) Add(o DropStats) DropStats {
	return DropStats{d.Received + o.Received, d.Kernel + o.Kernel, d.Interface + o.Interface,
		d.Oversize + o.Oversize, d.LinkDowns + o.LinkDowns, max(d.Link, o.Link)}
}

// OutageTracker tells which intervals a capture outage touched, from the
// DropStats read when each interval is emitted: an interval is touched
// when the link was down when it opened or closed, or went down in
// between. Emission follows an interval's end by the hold time, so an
// outage that starts in that gap also flags the interval before it (a
// false flag, never a missed one).
type OutageTracker struct {
	downs   uint64
	wasDown bool
}

// Touched reports whether the interval emitted with cumulative stats d
// was touched by an outage.
func (o *OutageTracker) Touched(d DropStats) bool {
	down := d.Link == LinkDown
	t := o.wasDown || down || d.LinkDowns != o.downs
	o.downs, o.wasDown = d.LinkDowns, down
	return t
}

// Source delivers raw frames.
type Source interface {
	// ReadPacket returns the next frame. data may alias buf or a kernel
	// ring and is valid until the next call. io.EOF ends a file;
	// ErrTimeout means no packet yet on a live source.
	ReadPacket(buf []byte) (data []byte, ts int64, wireLen int, err error)
	// LinkType is the link type of the frame ReadPacket returned last
	// (pcapng files may mix interfaces).
	LinkType() layers.LinkType
	// Stats returns cumulative drop counters since the source was opened.
	Stats() (DropStats, error)
	// Close releases the source. Call it only after the goroutine reading
	// from it has stopped: a ring must not be unmapped under a reader.
	Close() error
}

// Snaplener is implemented by sources that know their snap length (files, libpcap).
type Snaplener interface{ Snaplen() int }

// pather is implemented by file sources: the path they read.
type pather interface{ Path() string }

// snapSample is how many frames of a capture file CheckSnaplen looks at
// for link headers longer than the link type's (VLAN tags, MPLS labels).
const snapSample = 1000

// CheckSnaplen refuses a source whose snap length cannot hold its link
// header + identity.ip_bytes: its packets would be cut short at this tap
// only and look lost. For a file, the link header is the longest among
// its first frames (802.1Q/QinQ tags and MPLS labels included). The
// advice in the error is what makes it pass.
func CheckSnaplen(src Source, id IdentityConfig) error {
	s, ok := src.(Snaplener)
	if !ok || s.Snaplen() <= 0 {
		return nil
	}
	lt := src.LinkType()
	link := LinkHeaderLen(lt)
	if link < 0 {
		return nil // the parser counts its frames as unsupported_link
	}
	what := fmt.Sprintf("the %s link header (%d bytes)", lt, link)
	if p, ok := src.(pather); ok && p.Path() != "" {
		if seen := sampleLinkHeader(p.Path(), snapSample); seen > link {
			link = seen
			what = fmt.Sprintf("the %s link header with the VLAN tags or MPLS labels its first frames carry (%d bytes)", lt, link)
		}
	}
	sl, need := s.Snaplen(), link+id.IPBytes
	if sl >= need {
		return nil
	}
	msg := fmt.Sprintf("capture: snap length %d is too short: %s + capture.identity.ip_bytes (%d) need %d, or packets are cut short at this tap only and look lost; capture with a snap length of at least %d (tcpdump -s %d, or -s 0 for whole packets)",
		sl, what, id.IPBytes, need, need, need)
	if sl-link >= MinAdvisedIPBytes {
		msg += fmt.Sprintf(", or set capture.identity.ip_bytes: %d on both ends", sl-link)
	}
	return errors.New(msg)
}

// sampleLinkHeader returns the longest link header among the first n
// frames of the capture file at path, or -1.
func sampleLinkHeader(path string, n int) int {
	src, err := OpenFile(path)
	if err != nil {
		return -1
	}
	defer func() { _ = src.Close() }()
	longest := -1
	for range n {
		data, _, _, err := src.ReadPacket(nil)
		if err != nil {
			break
		}
		longest = max(longest, frameLinkHeader(data, src.LinkType()))
	}
	return longest
}

// frameLinkHeader returns the bytes before the IP header of a frame of
// link type lt, tags and labels included, or -1 where they are not
// captured.
func frameLinkHeader(data []byte, lt layers.LinkType) int {
	var et uint16
	off := 0
	switch lt {
	case layers.LinkTypeEthernet:
		if len(data) < 14 {
			return -1
		}
		et, off = be16(data[12:]), 14
	case layers.LinkTypeLinuxSLL:
		if len(data) < 16 {
			return -1
		}
		et, off = be16(data[14:]), 16
	case layers.LinkTypeLinuxSLL2:
		if len(data) < 20 {
			return -1
		}
		et, off = be16(data[0:]), 20
	default:
		return LinkHeaderLen(lt)
	}
	for {
		switch et {
		case etVLAN, etQinQ, etQinQ2:
			if len(data) < off+4 {
				return -1
			}
			et = be16(data[off+2:])
			off += 4
		case etMPLS, etMPLSmc:
			for {
				if len(data) < off+4 {
					return -1
				}
				bos := data[off+2]&1 != 0
				off += 4
				if bos {
					return off
				}
			}
		default:
			return off
		}
	}
}

// OpenSources opens the configured source: one per worker for afpacket
// (one PACKET_FANOUT group), else one.
func OpenSources(cfg SourceConfig, log *slog.Logger) ([]Source, error) {
	switch cfg.Kind {
	case "file":
		s, err := OpenFile(cfg.File)
		if err != nil {
			return nil, err
		}
		if cfg.BPF != "" {
			f, err := withBPF(s, cfg.BPF)
			if err != nil {
				_ = s.Close()
				return nil, err
			}
			s = f
		}
		return []Source{s}, nil
	case "afpacket":
		group := cfg.FanoutGroup
		if group == 0 {
			group = defaultFanoutGroup()
		}
		var out []Source
		for i := range max(cfg.Workers, 1) {
			c := cfg
			if i > 0 {
				c.Workers = -1 // marks a worker that does not report interface drops
			}
			s, err := OpenAFPacket(c, group, log)
			if err != nil {
				for _, o := range out {
					_ = o.Close()
				}
				return nil, fmt.Errorf("capture: worker %d of %d: %w", i, cfg.Workers, err)
			}
			out = append(out, s)
		}
		return out, nil
	case "pcap":
		s, err := OpenPcap(cfg, log)
		if err != nil {
			return nil, err
		}
		return []Source{s}, nil
	}
	return nil, fmt.Errorf("capture.source.kind: %q: want file, afpacket or pcap", cfg.Kind)
}

// Reader joins a Source and a Parser: the loop the sender and receiver run.
type Reader struct {
	src    Source
	p      *Parser
	buf    []byte
	mapped bool // src reads a file through a mapping
	// pending: an error met while reading ahead (NextBatch), returned by
	// the next call instead of reading.
	pending error
}

// buffered is implemented by live sources that read frames a kernel
// buffer already holds: Buffered is how many ReadPacket returns before it
// waits.
type buffered interface{ Buffered() int }

// NewReader returns a Reader; one per worker.
func NewReader(src Source, p *Parser) *Reader {
	fs, ok := src.(*fileSource)
	return &Reader{src: src, p: p, buf: make([]byte, 262144), mapped: ok && fs.classic != nil && fs.classic.mm != nil}
}

// OpenReaders returns one Reader per source, each with its own Parser (no
// shared state on the packet path), after CheckSnaplen on every source.
// With srcs nil it opens the sources cfg.Source names; release closes
// those once the readers' goroutines have stopped, and leaves sources the
// caller passed in to the caller. On an error, what it opened is closed.
func OpenReaders(srcs []Source, cfg Config, log *slog.Logger) (readers []*Reader, release func(), err error) {
	release = func() {}
	if srcs == nil {
		if srcs, err = OpenSources(cfg.liveSource(), log); err != nil {
			return nil, nil, err
		}
		opened := srcs
		release = func() {
			for _, s := range opened {
				_ = s.Close()
			}
		}
	}
	readers = make([]*Reader, len(srcs))
	for i, src := range srcs {
		var p *Parser
		if err = CheckSnaplen(src, cfg.Identity); err == nil {
			p, err = NewParser(cfg)
		}
		if err != nil {
			release()
			return nil, nil, err
		}
		readers[i] = NewReader(src, p)
	}
	return readers, release, nil
}

// Next fills pkt with the next measured packet, skipping (and counting)
// the rest. It returns io.EOF at the end of a file and ErrTimeout on an
// idle live source. It allocates nothing.
func (r *Reader) Next(pkt *Packet) error {
	if err := r.pending; err != nil {
		r.pending = nil
		return err
	}
	if r.mapped {
		return r.nextMapped(pkt)
	}
	return r.next(pkt)
}

// nextMapped is next on a mapped file, where a file cut short by another
// process while it is read (a capture ring overwriting its oldest file)
// faults instead of ending a read early: the fault becomes an error that
// says so, not a crash.
func (r *Reader) nextMapped(pkt *Packet) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			// Only a fault inside the mapping is the file's doing; any
			// other (a bug) goes on as the panic it is.
			if f, ok := p.(interface{ Addr() uintptr }); ok && r.inMapping(f.Addr()) {
				err = fmt.Errorf("capture: the capture file was cut short or overwritten while being read (fault at %#x): %w", f.Addr(), io.ErrUnexpectedEOF)
				return
			}
			panic(p)
		}
	}()
	return r.next(pkt)
}

// inMapping tells whether addr lies in the file mapping r reads.
func (r *Reader) inMapping(addr uintptr) bool {
	fs, ok := r.src.(*fileSource)
	if !ok || fs.classic == nil || len(fs.classic.mm) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(fs.classic.mm)))
	return addr >= lo && addr-lo < uintptr(len(fs.classic.mm))
}

func (r *Reader) next(pkt *Packet) error {
	for {
		data, ts, wl, err := r.src.ReadPacket(r.buf)
		if err != nil {
			return err
		}
		if r.p.Parse(data, wl, ts, r.src.LinkType(), pkt) {
			return nil
		}
	}
}

// NextBatch fills pkts with the next packets: it waits for the first as
// Next does, then takes only the frames the capture buffer already holds
// (a live AF_PACKET ring's block), so that no packet waits for a later
// one; other sources give one packet a call. It returns how many it
// filled, at least one unless err is set; an error met after the first
// packet is returned by the next call.
func (r *Reader) NextBatch(pkts []Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	if err := r.Next(&pkts[0]); err != nil {
		return 0, err
	}
	bs, ok := r.src.(buffered)
	if !ok {
		return 1, nil
	}
	n := 1
	for n < len(pkts) && bs.Buffered() > 0 {
		data, ts, wl, err := r.src.ReadPacket(r.buf)
		if err != nil {
			r.pending = err
			break
		}
		if r.p.Parse(data, wl, ts, r.src.LinkType(), &pkts[n]) {
			n++
		}
	}
	return n, nil
}

// Parser returns the reader's parser (for its counters).
func (r *Reader) Parser() *Parser { return r.p }

// Source returns the reader's source (for its drop counters).
func (r *Reader) Source() Source { return r.src }

// Open validates cfg, opens its sources, checks their snap length and
// returns one Reader per worker. Close them with CloseReaders.
func (c Config) Open(log *slog.Logger) ([]*Reader, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	srcs, err := OpenSources(c.liveSource(), log)
	if err != nil {
		return nil, err
	}
	var out []*Reader
	for _, s := range srcs {
		err = CheckSnaplen(s, c.Identity)
		var p *Parser
		if err == nil {
			p, err = NewParser(c)
		}
		if err != nil {
			for _, s := range srcs {
				_ = s.Close()
			}
			return nil, err
		}
		out = append(out, NewReader(s, p))
	}
	return out, nil
}

// liveSource is the source configuration with its snap length resolved
// against the identity keys (SourceConfig.SnapLen).
func (c Config) liveSource() SourceConfig {
	s := c.Source
	if s.Kind != "file" {
		s.Snaplen = s.SnapLen(c.Identity)
	}
	return s
}

// CloseReaders closes every reader's source.
func CloseReaders(rs []*Reader) error {
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.src.Close())
	}
	return errors.Join(errs...)
}

// EachPacket calls fn for every measured packet of a capture file, in file
// order, until fn returns false (ground-truth joins, evaluation, tools).
// A file whose last record is cut short has every complete record passed
// to fn and returns the *TruncatedError (errors.As) for the caller to warn
// of, or to refuse.
func EachPacket(path string, p *Parser, fn func(*Packet) bool) error {
	src, err := OpenFile(path)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	rd := NewReader(src, p)
	var pk Packet
	for {
		err := rd.Next(&pk)
		if te := (*TruncatedError)(nil); errors.As(err, &te) {
			return te
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fn(&pk) {
			return nil
		}
	}
}
