package capture

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// afSource is a live AF_PACKET socket with a TPACKET_V3 ring, read
// directly: pure Go, nanosecond kernel timestamps, zero-copy. It reads
// the ring itself rather than through gopacket/afpacket because that
// reader takes a mutex and bumps an atomic counter for every packet:
// three locked instructions, 46 % of lds-sender's CPU at 2.5 Mpps in a
// perf record profile (docs/testbed.md, "Live capture performance").
// One goroutine reads a source (Source contract); only Stats may be
// called from elsewhere.
//
// The source outlives its interface's outages: a link that goes down
// (or is down, or missing, when the source opens) is waited for, and an
// interface deleted and created again under the same name is bound
// again (link.go).
type afSource struct {
	fd     int      // the socket (non-blocking), for the socket options
	file   *os.File // fd in Go's network poller, which waits for blocks (waitBlock); closes fd
	rc     syscall.RawConn
	ready  func(uintptr) bool // rc.Read's check, made once (no allocation per wait)
	checks int                // calls of ready in the current rc.Read
	ring   []byte
	bs, nb int
	snap   int // bytes of each frame the socket filter keeps
	pfd    [1]unix.PollFd
	pollMS int

	blk   int    // block being read, or waited for
	held  bool   // block blk is ours (TP_STATUS_USER) until released
	left  uint32 // packets of the held block not yet returned
	off   int    // ring offset of the next packet's tpacket3_hdr
	limit int    // end of the held block in the ring

	ifname   string
	reportIf bool   // only one worker of a fanout group reports interface drops and link state
	ifBase   uint64 // interface drops when opened
	ifAcc    uint64 // interface drops of earlier incarnations of the interface

	cfg      SourceConfig
	cbs, cnb int // configured geometry (for the log line)
	group    uint16
	log      *slog.Logger
	link     linkWatch
	linkDown bool // the link as the reader last saw it
	maxFrame int  // interface MTU + Ethernet header: longer frames are counted as oversize
	oversize atomic.Uint64

	mu             sync.Mutex // Stats: the kernel resets its counters on every read
	packets, drops uint64
}

func defaultFanoutGroup() uint16 { return uint16(os.Getpid()) }

// OpenAFPacket opens one AF_PACKET socket on cfg.Interface with a
// TPACKET_V3 receive ring of RingGeometry(block_size, num_blocks). With
// cfg.Workers > 1 it joins PACKET_FANOUT group fanoutGroup (hash mode: the
// kernel keeps a flow on one socket), so open one per worker with the same
// group; OpenSources does that.
//
// An interface that is down, or does not exist yet, is not an error: the
// source waits for it (ReadPacket returns ErrTimeout meanwhile) and
// reports the outage in Stats. An interface whose receive offloads
// coalesce packets is refused (ErrCoalescing) unless
// cfg.AllowCoalescing. Call it in the interface's network namespace:
// the source keeps working there whatever thread reads it.
func OpenAFPacket(cfg SourceConfig, fanoutGroup uint16, log *slog.Logger) (Source, error) {
	if cfg.Interface == "" {
		return nil, errors.New("capture.source.interface: required for afpacket")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := DefaultConfig().Source
	s := &afSource{fd: -1, ifname: cfg.Interface, reportIf: cfg.Workers >= 0, cfg: cfg, group: fanoutGroup, log: log,
		cbs: cmp.Or(cfg.BlockSize, d.BlockSize), cnb: cmp.Or(cfg.NumBlocks, d.NumBlocks)}
	s.bs, s.nb = RingGeometry(s.cbs, s.cnb)
	s.ready = s.readyCheck
	s.snap = cfg.SnapLen(DefaultConfig().Identity) // callers with other identity keys resolve Snaplen first (Config.Open)
	s.cfg.BlockTimeout = cmp.Or(cfg.BlockTimeout, d.BlockTimeout)
	s.pollMS = int(cmp.Or(cfg.PollTimeout, d.PollTimeout) / time.Millisecond)
	if err := s.link.init(cfg.Interface); err != nil {
		return nil, fmt.Errorf("capture: afpacket on %q: %w", cfg.Interface, err)
	}
	st := s.link.state()
	if !st.exists {
		s.link.changed(st, s.reportIf, log)
		return s, nil
	}
	if err := s.open(st); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// open makes the socket and its ring on the interface as st found it.
func (s *afSource) open(st linkState) error {
	cfg := s.cfg
	if err := checkCoalescing(cfg, s.log.Warn); err != nil {
		return err
	}
	// Protocol 0 until bind: the socket receives nothing before it is
	// bound to the interface, so no other interface's frame slips in.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("capture: AF_PACKET socket for %q (needs CAP_NET_RAW): %w", cfg.Interface, err)
	}
	// A non-blocking descriptor goes into the network poller. The
	// file's Fd method would make it blocking again: never call it.
	file := os.NewFile(uintptr(fd), "afpacket:"+cfg.Interface)
	rc, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		return fmt.Errorf("capture: afpacket on %q: raw connection of the socket: %w", cfg.Interface, err)
	}
	s.mu.Lock() // Stats reads fd and ifBase from another goroutine
	s.fd, s.file, s.rc = fd, file, rc
	s.mu.Unlock()
	s.blk, s.held, s.left = 0, false, 0
	s.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN | unix.POLLERR}
	fail := func(what string, err error) error {
		_ = s.closeRing()
		return fmt.Errorf("capture: afpacket on %q: %s: %w", cfg.Interface, what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return fail("TPACKET_V3 (kernel too old?)", err)
	}
	bs, nb := s.bs, s.nb
	const frame = 4096 // V3 packs frames into blocks; this only sets the frame count the kernel checks
	req := unix.TpacketReq3{
		Block_size: uint32(bs), Block_nr: uint32(nb),
		Frame_size: frame, Frame_nr: uint32(bs / frame * nb),
		Retire_blk_tov: uint32(cfg.BlockTimeout / time.Millisecond),
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fail(fmt.Sprintf("receive ring of %d × %d bytes (lower capture.source.num_blocks or block_size?)", nb, bs), err)
	}
	if s.ring, err = unix.Mmap(fd, 0, bs*nb, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail("mmap of the receive ring", err)
	}
	// The filter goes on before bind, so no frame reaches the ring
	// whole or unfiltered.
	if err := s.attachFilter(); err != nil {
		return fail("socket filter", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: st.index}); err != nil {
		return fail("bind", err)
	}
	if cfg.Promiscuous {
		mr := unix.PacketMreq{Ifindex: int32(st.index), Type: unix.PACKET_MR_PROMISC}
		if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mr); err != nil {
			return fail("promiscuous mode", err)
		}
	}
	if cfg.Workers > 1 || cfg.Workers < 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_FANOUT, unix.PACKET_FANOUT_HASH<<16|int(s.group)); err != nil {
			return fail(fmt.Sprintf("PACKET_FANOUT group %d (another process using the same group id? set capture.source.fanout_group)", s.group), err)
		}
	}
	ifBase, _ := readIfDrops(cfg.Interface)
	s.mu.Lock()
	s.ifBase = ifBase
	s.mu.Unlock()
	s.maxFrame = math.MaxInt // MTU unknown: nothing counted as oversize
	if st.mtu > 0 {
		s.maxFrame = st.mtu + 14
	}
	s.link.bound = st.index
	s.linkDown = !st.up
	s.log.Info("afpacket source open", "interface", cfg.Interface, "block_size", bs, "num_blocks", nb,
		"configured_block_size", s.cbs, "configured_num_blocks", s.cnb,
		"snaplen", s.snap, "fanout_group", s.group, "workers", cfg.Workers, "promiscuous", cfg.Promiscuous, "mtu", st.mtu,
		"holds_at_low_rates", RingHold(s.cbs, s.cnb, cfg.BlockTimeout, 0))
	s.link.changed(st, s.reportIf, s.log)
	return nil
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// blockHdr is the header of ring block i.
func (s *afSource) blockHdr(i int) *unix.TpacketHdrV1 {
	d := (*unix.TpacketBlockDesc)(unsafe.Pointer(&s.ring[i*s.bs]))
	return (*unix.TpacketHdrV1)(unsafe.Pointer(&d.Hdr[0]))
}

// ReadPacket returns the next frame of the ring. The data points into
// the ring: its block goes back to the kernel on the first call after
// its last packet was returned, so no packet is copied and a block is
// held no longer than the caller takes over its packets.
func (s *afSource) ReadPacket([]byte) ([]byte, int64, int, error) {
	for s.left == 0 {
		if s.fd < 0 {
			if err := s.reopen(); err != nil {
				return nil, 0, 0, err
			}
			continue
		}
		if err := s.nextBlock(); err != nil {
			return nil, 0, 0, err
		}
	}
	if s.off+unix.SizeofTpacket3Hdr > s.limit {
		return nil, 0, 0, fmt.Errorf("capture: afpacket on %q: packet header at ring offset %d runs past its block (ends at %d): ring corrupted", s.ifname, s.off, s.limit)
	}
	h := (*unix.Tpacket3Hdr)(unsafe.Pointer(&s.ring[s.off]))
	start := s.off + int(h.Mac)
	end := start + int(h.Snaplen)
	if end > s.limit {
		return nil, 0, 0, fmt.Errorf("capture: afpacket on %q: packet at ring offset %d runs past its block (%d > %d): ring corrupted", s.ifname, s.off, end, s.limit)
	}
	ts := int64(h.Sec)*1e9 + int64(h.Nsec)
	wl := int(h.Len)
	if wl > s.maxFrame {
		s.countOversize(s.ring[start:end:end], wl)
	}
	if h.Status&unix.TP_STATUS_VLAN_VALID != 0 {
		wl += 4 // the kernel took the outer VLAN tag off the frame; the wire carried it (as libpcap reports it)
	}
	s.left--
	s.off += int(h.Next_offset)
	return s.ring[start:end:end], ts, wl, nil
}

// Buffered is how many frames of the held block ReadPacket has yet to
// return: it returns them without waiting.
func (s *afSource) Buffered() int { return int(s.left) }

// pollChunkMS is the longest single wait of waitRaw (ms).
const pollChunkMS = 4

// pollRaw waits up to ms for the socket with ppoll(2), without telling the
// Go scheduler (a raw system call: the goroutine keeps its processor, as
// if it computed). It is the fallback of waitBlock when the network
// poller cannot wait (waitRaw). Through the scheduler (unix.Poll) the
// runtime's monitor would take the processor of a thread 10 ms in a call
// and set itself back to waking every 20 µs. The waits are short
// (pollChunkMS), and a preemption request interrupts one (EINTR).
func (s *afSource) pollRaw(ms int) (int, error) {
	ts := unix.NsecToTimespec(int64(ms) * 1e6)
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&s.pfd[0])), uintptr(len(s.pfd)),
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// nextBlock releases the held block and waits for the next one: the ring
// is checked first and poll(2) is called only when the next block is
// still the kernel's, so a busy ring costs no system call.
func (s *afSource) nextBlock() error {
	if s.held {
		atomic.StoreUint32(&s.blockHdr(s.blk).Block_status, unix.TP_STATUS_KERNEL)
		s.held = false
		s.blk++
		if s.blk == s.nb {
			s.blk = 0
		}
	}
	bh := s.blockHdr(s.blk)
	if atomic.LoadUint32(&bh.Block_status)&unix.TP_STATUS_USER == 0 {
		if err := s.waitBlock(); err != nil {
			return err
		}
	}
	if s.linkDown {
		// Packets again: the link is back (no event says so), unless
		// they are the last of an interface since deleted, whose ring
		// checkLink has just closed.
		if _ = s.checkLink(); s.fd < 0 {
			return ErrTimeout
		}
	}
	s.held = true
	s.left = bh.Num_pkts
	s.off = s.blk*s.bs + int(bh.Offset_to_first_pkt)
	s.limit = (s.blk + 1) * s.bs
	return nil
}

// readyCheck is rc.Read's check (s.ready): done when the next block is
// ours. Its first call in a Read runs before the goroutine parks, so a
// block retired before that is not waited for; a later call follows a
// wakeup, and a wakeup without a block ends the Read too, for waitBlock
// to look at the socket's error.
func (s *afSource) readyCheck(uintptr) bool {
	s.checks++
	return s.checks > 1 || atomic.LoadUint32(&s.blockHdr(s.blk).Block_status)&unix.TP_STATUS_USER != 0
}

// waitBlock waits up to the poll timeout for block s.blk in Go's network
// poller: the goroutine parks without a processor, as tcpdump sleeps in
// poll(2), so the runtime neither preempts it (its monitor signals a
// goroutine running 10 ms) nor retakes a processor from a thread in a
// system call. The kernel wakes the socket once per retired TPACKET_V3
// block (and on a socket error); readyCheck runs before parking, so a
// block retired in between is not lost (the poller is edge-triggered).
// It returns nil when the block is ours, else what checkLink says.
func (s *afSource) waitBlock() error {
	if err := s.file.SetReadDeadline(time.Now().Add(time.Duration(s.pollMS) * time.Millisecond)); err != nil {
		return s.waitRaw() // not in the poller
	}
	bh := s.blockHdr(s.blk)
	for {
		s.checks = 0
		err := s.rc.Read(s.ready)
		switch {
		case atomic.LoadUint32(&bh.Block_status)&unix.TP_STATUS_USER != 0:
			// The block, whatever Read says: a deadline that passed
			// while the process was stopped (SIGSTOP) ends the Read
			// without a last check, with the ring full.
			return nil
		case err == nil:
			// A wakeup without a block: a socket error (the kernel
			// reports ENETDOWN when the interface goes down or away;
			// reading SO_ERROR clears it), or a block already taken.
			if e, _ := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_ERROR); e != 0 {
				return s.checkLink()
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Idle: a link that went away without a socket error
			// (carrier lost) shows here.
			return s.checkLink()
		default:
			// The poller reports an error-only event as not pollable
			// until the next event: wait the old way meanwhile.
			return s.waitRaw()
		}
	}
}

// waitRaw waits up to the poll timeout for block s.blk with raw ppoll(2)
// calls (pollRaw).
func (s *afSource) waitRaw() error {
	bh := s.blockHdr(s.blk)
	waited := 0 // ms polled without a block
	for atomic.LoadUint32(&bh.Block_status)&unix.TP_STATUS_USER == 0 {
		chunk := min(s.pollMS-waited, pollChunkMS)
		n, err := s.pollRaw(chunk)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("capture: afpacket poll on %q: %w", s.ifname, err)
		case n == 0 && waited+chunk < s.pollMS:
			waited += chunk
		case n == 0:
			return s.checkLink()
		case s.pfd[0].Revents&unix.POLLERR != 0 && atomic.LoadUint32(&bh.Block_status)&unix.TP_STATUS_USER == 0:
			_, _ = unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_ERROR)
			return s.checkLink()
		}
	}
	return nil
}

// attachFilter attaches the socket filter: capture.source.bpf compiled by
// libpcap (builds with -tags pcap), or accept-all, with every accepting
// return cut to the snap length (SnapFilter).
func (s *afSource) attachFilter() error {
	var user []bpf.RawInstruction
	if s.cfg.BPF != "" {
		var err error
		if user, err = compileAFPacketBPF(s.cfg.BPF); err != nil {
			return fmt.Errorf("bpf %s: %w", strconv.Quote(s.cfg.BPF), err)
		}
	}
	prog, err := SnapFilter(user, uint32(s.snap))
	if err != nil {
		return err
	}
	return s.setBPF(prog)
}

// setBPF attaches a classic BPF program to the socket.
func (s *afSource) setBPF(ins []bpf.RawInstruction) error {
	if len(ins) == 0 || len(ins) > 0xffff {
		return fmt.Errorf("a BPF program of %d instructions (want 1..65535)", len(ins))
	}
	f := make([]unix.SockFilter, len(ins))
	for i, in := range ins {
		f[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return unix.SetsockoptSockFprog(s.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]})
}

func (s *afSource) LinkType() layers.LinkType { return layers.LinkTypeEthernet }

// Snaplen is the bytes of each frame the socket keeps (CheckSnaplen).
func (s *afSource) Snaplen() int { return s.snap }

// Stats: the kernel's TPACKET_V3 counters are reset on every read, so
// they are summed here. Received counts dropped packets too (the kernel
// adds tp_drops to tp_packets).
func (s *afSource) Stats() (DropStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readKernelStats(); err != nil {
		return DropStats{}, err
	}
	d := DropStats{Received: s.packets, Kernel: s.drops, Oversize: s.oversize.Load()}
	if s.reportIf {
		d.Interface = s.ifAcc
		if s.fd >= 0 {
			if n, err := readIfDrops(s.ifname); err == nil && n >= s.ifBase {
				d.Interface += n - s.ifBase
			}
		}
		d.LinkDowns, d.Link = s.link.report()
	}
	return d, nil
}

// readKernelStats adds the kernel's counters (reset by every read) to
// the totals; s.mu held.
func (s *afSource) readKernelStats() error {
	if s.fd < 0 {
		return nil
	}
	st, err := unix.GetsockoptTpacketStatsV3(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return fmt.Errorf("capture: afpacket stats on %q: %w", s.ifname, err)
	}
	s.packets += uint64(st.Packets)
	s.drops += uint64(st.Drops)
	return nil
}

// Close unmaps the ring and closes the socket; call it after the reading
// goroutine stopped (Source contract).
func (s *afSource) Close() error {
	errs := []error{s.closeRing(), s.link.close()}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("capture: afpacket close on %q: %w", s.ifname, err)
	}
	return nil
}

// closeRing unmaps the ring and closes the socket, keeping its counters.
func (s *afSource) closeRing() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.fd >= 0 {
		_ = s.readKernelStats() // the last counters, when the socket still gives them
		if s.reportIf {
			if n, err := readIfDrops(s.ifname); err == nil && n >= s.ifBase {
				s.ifAcc += n - s.ifBase
			}
		}
	}
	if s.ring != nil {
		errs = append(errs, unix.Munmap(s.ring))
		s.ring = nil
	}
	if s.fd >= 0 {
		errs = append(errs, s.file.Close()) // closes fd, and wakes a parked reader
		s.fd, s.file, s.rc = -1, nil, nil
	}
	s.left, s.held = 0, false
	return errors.Join(errs...)
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
