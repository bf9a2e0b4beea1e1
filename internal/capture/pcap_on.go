//go:build pcap

package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcap"
	"golang.org/x/net/bpf"
)

const pcapBuilt = true

// pcapSource is a live libpcap handle with nanosecond timestamps.
type pcapSource struct {
	h       *pcap.Handle
	ifname  string
	link    layers.LinkType
	snaplen int
}

// OpenPcap opens cfg.Interface through libpcap: nanosecond precision, the
// configured timestamp source (refused if the interface lacks it), BPF.
func OpenPcap(cfg SourceConfig, log *slog.Logger) (Source, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkCoalescing(cfg, log.Warn); err != nil {
		return nil, err
	}
	in, err := pcap.NewInactiveHandle(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("capture: libpcap on %q: %w", cfg.Interface, err)
	}
	defer in.CleanUp()
	fail := func(what string, err error) (Source, error) {
		return nil, fmt.Errorf("capture: libpcap on %q: %s: %w", cfg.Interface, what, err)
	}
	snap := cfg.SnapLen(DefaultConfig().Identity) // Config.Open resolves it against the identity keys
	if err := in.SetSnapLen(snap); err != nil {
		return fail("snaplen", err)
	}
	if err := in.SetPromisc(cfg.Promiscuous); err != nil {
		return fail("promiscuous", err)
	}
	pt := cfg.PollTimeout
	if pt <= 0 {
		pt = DefaultConfig().Source.PollTimeout
	}
	if err := in.SetTimeout(pt); err != nil {
		return fail("timeout", err)
	}
	if cfg.BufferSize > 0 {
		if err := in.SetBufferSize(cfg.BufferSize); err != nil {
			return fail("buffer_size", err)
		}
	}
	if cfg.TimestampSource != "" {
		want, err := pcap.TimestampSourceFromString(cfg.TimestampSource)
		if err != nil {
			return nil, fmt.Errorf("capture.source.timestamp_source: %q is not a libpcap timestamp type (host, host_lowprec, host_hiprec, adapter, adapter_unsynced): %w", cfg.TimestampSource, err)
		}
		supported := in.SupportedTimestamps()
		// An empty list means the device offers only libpcap's default, host.
		ok := len(supported) == 0 && want.String() == "host"
		names := []string{"host"}
		if len(supported) > 0 {
			names = nil
		}
		for _, s := range supported {
			names = append(names, s.String())
			ok = ok || s == want
		}
		if !ok {
			return nil, fmt.Errorf("capture.source.timestamp_source: interface %q does not offer %q timestamps (it offers: %s); pick one of those or leave it empty for the default",
				cfg.Interface, cfg.TimestampSource, strings.Join(names, ", "))
		}
		if err := in.SetTimestampSource(want); err != nil {
			return fail("timestamp source", err)
		}
	}
	h, err := in.Activate()
	if err != nil {
		return fail("activate (needs CAP_NET_RAW and an existing interface)", err)
	}
	if h.Resolution() != gopacket.TimestampResolutionNanosecond && log != nil {
		log.Warn("libpcap gives microsecond timestamps only", "interface", cfg.Interface)
	}
	// libpcap cuts frames to the snap length itself after reading them
	// from its ring: only a socket filter, whose accepting returns carry
	// the snap length, makes the kernel store that much and no more.
	// SetBPFFilter compiles with the handle's snap length; without a
	// filter, one that accepts everything.
	if cfg.BPF != "" {
		if err := h.SetBPFFilter(cfg.BPF); err != nil {
			h.Close()
			return nil, fmt.Errorf("capture.source.bpf: %q: %w", cfg.BPF, err)
		}
	} else if err := h.SetBPFInstructionFilter([]pcap.BPFInstruction{{Code: bpfClassRet | bpfRvalK, K: uint32(snap)}}); err != nil {
		h.Close()
		return fail("socket filter keeping the snap length", err)
	}
	if log != nil {
		log.Info("libpcap source open", "interface", cfg.Interface, "snaplen", snap,
			"timestamp_source", cfg.TimestampSource, "bpf", cfg.BPF, "link", h.LinkType())
	}
	return &pcapSource{h: h, ifname: cfg.Interface, link: h.LinkType(), snaplen: h.SnapLen()}, nil
}

func (s *pcapSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	data, ci, err := s.h.ZeroCopyReadPacketData()
	if err != nil {
		if errors.Is(err, pcap.NextErrorTimeoutExpired) {
			return nil, 0, 0, ErrTimeout
		}
		return nil, 0, 0, fmt.Errorf("capture: libpcap read on %q: %w", s.ifname, err)
	}
	return data, ci.Timestamp.UnixNano(), ci.Length, nil
}

func (s *pcapSource) LinkType() layers.LinkType { return s.link }
func (s *pcapSource) Snaplen() int              { return s.snaplen }

func (s *pcapSource) Stats() (DropStats, error) {
	st, err := s.h.Stats()
	if err != nil {
		return DropStats{}, fmt.Errorf("capture: libpcap stats on %q: %w", s.ifname, err)
	}
	return DropStats{Received: uint64(st.PacketsReceived), Kernel: uint64(st.PacketsDropped), Interface: uint64(st.PacketsIfDropped)}, nil
}

func (s *pcapSource) Close() error {
	s.h.Close()
	return nil
}

// bpfSource filters another source (a file) through a compiled BPF program,
// so replay selects exactly what a live BPF filter would.
type bpfSource struct {
	Source
	f *pcap.BPF
}

// Path is the path of the file under the filter, or "".
func (s *bpfSource) Path() string {
	if p, ok := s.Source.(pather); ok {
		return p.Path()
	}
	return ""
}

func withBPF(src Source, expr string) (Source, error) {
	f, err := pcap.NewBPF(src.LinkType(), 262144, expr)
	if err != nil {
		return nil, fmt.Errorf("capture.source.bpf: %q: %w", expr, err)
	}
	return &bpfSource{Source: src, f: f}, nil
}

func (s *bpfSource) ReadPacket(buf []byte) ([]byte, int64, int, error) {
	for {
		data, ts, wl, err := s.Source.ReadPacket(buf)
		if err != nil {
			return data, ts, wl, err
		}
		ci := gopacket.CaptureInfo{CaptureLength: len(data), Length: wl}
		if s.f.Matches(ci, data) {
			return data, ts, wl, nil
		}
	}
}

func (s *bpfSource) Snaplen() int {
	if sl, ok := s.Source.(Snaplener); ok {
		return sl.Snaplen()
	}
	return 0
}

// compileAFPacketBPF compiles expr with libpcap for an Ethernet packet
// socket; its accepting returns keep MaxSnaplen bytes (SnapFilter cuts
// them to the snap length).
func compileAFPacketBPF(expr string) ([]bpf.RawInstruction, error) {
	ins, err := pcap.CompileBPFFilter(layers.LinkTypeEthernet, MaxSnaplen, expr)
	if err != nil {
		return nil, fmt.Errorf("capture.source.bpf: %w", err)
	}
	raw := make([]bpf.RawInstruction, len(ins))
	for i, in := range ins {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return raw, nil
}
