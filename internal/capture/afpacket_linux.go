package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/gopacket/gopacket/afpacket"
	"github.com/gopacket/gopacket/layers"
)

// afSource is a live AF_PACKET socket with a TPACKET_V3 ring: pure Go,
// nanosecond kernel timestamps, zero-copy reads from the ring.
type afSource struct {
	tp         *afpacket.TPacket
	ifname     string
	reportIf   bool      // only one worker of a fanout group reports interface drops
	ifBase     uint64    // interface drops when opened
	kernelBase DropStats // socket counters are cumulative in afpacket
}

func defaultFanoutGroup() uint16 { return uint16(os.Getpid()) }

// OpenAFPacket opens one AF_PACKET socket on cfg.Interface. With
// cfg.Workers > 1 it joins PACKET_FANOUT group fanoutGroup (hash mode: the
// kernel keeps a flow on one socket), so open one per worker with the same
// group; OpenSources does that.
func OpenAFPacket(cfg SourceConfig, fanoutGroup uint16, log *slog.Logger) (Source, error) {
	if cfg.Interface == "" {
		return nil, errors.New("capture.source.interface: required for afpacket")
	}
	bs := cfg.BlockSize
	if bs == 0 {
		bs = DefaultConfig().Source.BlockSize
	}
	nb := cfg.NumBlocks
	if nb == 0 {
		nb = DefaultConfig().Source.NumBlocks
	}
	bt, pt := cfg.BlockTimeout, cfg.PollTimeout
	if bt == 0 {
		bt = DefaultConfig().Source.BlockTimeout
	}
	if pt == 0 {
		pt = DefaultConfig().Source.PollTimeout
	}
	tp, err := afpacket.NewTPacket(
		afpacket.OptInterface(cfg.Interface),
		afpacket.TPacketVersion3,
		afpacket.OptFrameSize(4096), // V3 packs frames into blocks; this only sets the frame count
		afpacket.OptBlockSize(bs),
		afpacket.OptNumBlocks(nb),
		afpacket.OptBlockTimeout(bt),
		afpacket.OptPollTimeout(pt),
	)
	if err != nil {
		return nil, fmt.Errorf("capture: AF_PACKET socket on %q (needs CAP_NET_RAW and an existing interface): %w", cfg.Interface, err)
	}
	s := &afSource{tp: tp, ifname: cfg.Interface, reportIf: cfg.Workers >= 0}
	fail := func(what string, err error) (Source, error) {
		tp.Close()
		return nil, fmt.Errorf("capture: afpacket on %q: %s: %w", cfg.Interface, what, err)
	}
	if cfg.Promiscuous {
		if err := tp.SetPromiscuous(true); err != nil {
			return fail("promiscuous mode", err)
		}
	}
	if cfg.BPF != "" {
		if err := setAFPacketBPF(tp, cfg); err != nil {
			return fail("bpf "+strconv.Quote(cfg.BPF), err)
		}
	}
	if cfg.Workers > 1 || cfg.Workers < 0 {
		if err := tp.SetFanout(afpacket.FanoutHash, fanoutGroup); err != nil {
			return fail(fmt.Sprintf("PACKET_FANOUT group %d (another process using the same group id? set capture.source.fanout_group)", fanoutGroup), err)
		}
	}
	s.ifBase, _ = readIfDrops(cfg.Interface)
	if log != nil {
		log.Info("afpacket source open", "interface", cfg.Interface, "block_size", bs, "num_blocks", nb,
			"fanout_group", fanoutGroup, "workers", cfg.Workers, "promiscuous", cfg.Promiscuous)
	}
	return s, nil
}

func (s *afSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	data, ci, err := s.tp.ZeroCopyReadPacketData()
	if err != nil {
		if errors.Is(err, afpacket.ErrTimeout) {
			return nil, 0, 0, ErrTimeout
		}
		return nil, 0, 0, fmt.Errorf("capture: afpacket read on %q: %w", s.ifname, err)
	}
	return data, ci.Timestamp.UnixNano(), ci.Length, nil
}

func (s *afSource) LinkType() layers.LinkType { return layers.LinkTypeEthernet }

func (s *afSource) Stats() (DropStats, error) {
	_, v3, err := s.tp.SocketStats()
	if err != nil {
		return DropStats{}, fmt.Errorf("capture: afpacket stats on %q: %w", s.ifname, err)
	}
	d := DropStats{Received: uint64(v3.Packets()), Kernel: uint64(v3.Drops())}
	if s.reportIf {
		if n, err := readIfDrops(s.ifname); err == nil && n >= s.ifBase {
			d.Interface = n - s.ifBase
		}
	}
	return d, nil
}

func (s *afSource) Close() error {
	s.tp.Close()
	return nil
}

// readIfDrops reads the interface's receive drops from sysfs.
func readIfDrops(ifname string) (uint64, error) {
	var sum uint64
	for _, f := range []string{"rx_dropped", "rx_missed_errors"} {
		b, err := os.ReadFile("/sys/class/net/" + ifname + "/statistics/" + f)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}
