package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lds-net/lds/tools/linkem"
)

// TrafficConfig shapes the generator's traffic: Flows flows from SrcAddr
// to dst's addresses, UDP and TCP-like (TCP headers with advancing
// sequence numbers, no handshake), whose sizes follow a Pareto law, at a
// total of PPS packets per second.
type TrafficConfig struct {
	Flows       int           `yaml:"flows"`
	PPS         int           `yaml:"pps"`
	Duration    time.Duration `yaml:"duration"`
	ParetoShape float64       `yaml:"pareto_shape"` // of the flows' shares of packets; smaller = heavier tail
	UDPShare    float64       `yaml:"udp_share"`    // fraction of flows over UDP, the rest TCP
	MaxPayload  int           `yaml:"max_payload"`
	FullShare   float64       `yaml:"full_share"` // fraction of packets carrying MaxPayload bytes
	Seed        uint64        `yaml:"seed"`
	// DstMAC is the frames' destination MAC. The default is an address no
	// interface owns: the frames still reach every tap on the way (taps see
	// all frames) but dst's kernel drops them unseen, so it sends no TCP
	// reset or ICMP error back through the emulator.
	DstMAC string `yaml:"dst_mac"`
}

// DefaultTraffic is the small live test's mix.
func DefaultTraffic() TrafficConfig {
	return TrafficConfig{Flows: 200, PPS: 3000, Duration: 4 * time.Second, ParetoShape: 1.2,
		UDPShare: 0.4, MaxPayload: 1200, FullShare: 0.3, Seed: 1, DstMAC: "02:00:00:00:00:02"}
}

// MaxPPS is the most the generator will send: above ~30k packets/s the
// emulator's busy-waiting scheduler is no longer faithful on this machine.
const MaxPPS = 25000

// Validate checks the keys.
func (c *TrafficConfig) Validate() error {
	var errs []error
	if c.Flows < 1 || c.Flows > 1<<20 {
		errs = append(errs, fmt.Errorf("traffic.flows: %d outside 1..%d", c.Flows, 1<<20))
	}
	if c.PPS < 1 || c.PPS > MaxPPS {
		errs = append(errs, fmt.Errorf("traffic.pps: %d outside 1..%d (the emulator is faithful up to ~30k/s here)", c.PPS, MaxPPS))
	}
	if c.Duration <= 0 {
		errs = append(errs, errors.New("traffic.duration: must be > 0"))
	}
	if c.ParetoShape <= 0 {
		errs = append(errs, errors.New("traffic.pareto_shape: must be > 0 (e.g. 1.2)"))
	}
	if c.UDPShare < 0 || c.UDPShare > 1 || c.FullShare < 0 || c.FullShare > 1 {
		errs = append(errs, errors.New("traffic.udp_share / full_share: must be in [0, 1]"))
	}
	if c.MaxPayload < 8 || c.MaxPayload > 1400 {
		errs = append(errs, fmt.Errorf("traffic.max_payload: %d outside 8..1400 (frames stay below the 1500-byte MTU)", c.MaxPayload))
	}
	if _, err := net.ParseMAC(c.DstMAC); err != nil {
		errs = append(errs, fmt.Errorf("traffic.dst_mac: %w", err))
	}
	return errors.Join(errs...)
}

// TrafficStats says what the generator did.
type TrafficStats struct {
	Sent       uint64
	SendErrors uint64
	Start, End time.Time
}

type genFlow struct {
	dst          [4]byte
	sport, dport uint16
	tcp          bool
	seq, ack     uint32
	ipid         uint16
}

// Generate sends the traffic out of ifname in the network namespace
// netns (a path; "" = here), starting at start (the caller aligns it to an
// interval boundary), until Duration has passed or ctx ends.
func Generate(ctx context.Context, netns, ifname string, start time.Time, c TrafficConfig) (TrafficStats, error) {
	var st TrafficStats
	if err := c.Validate(); err != nil {
		return st, err
	}
	dmac, _ := net.ParseMAC(c.DstMAC)
	var fd int
	var smac net.HardwareAddr
	err := linkem.InNetns(netns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("testbed: generator interface %q: %w", ifname, err)
		}
		smac = ifc.HardwareAddr
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			return fmt.Errorf("testbed: generator AF_PACKET socket: %w", err)
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifc.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("testbed: bind generator socket to %q: %w", ifname, err)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)

	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	flows, cum := makeFlows(c, rng)
	frame := make([]byte, 14+20+20+c.MaxPayload)
	copy(frame[0:6], dmac)
	copy(frame[6:12], smac)
	frame[12], frame[13] = 0x08, 0x00

	if d := time.Until(start); d > 0 {
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(d):
		}
	}
	st.Start = time.Now()
	total := int(int64(c.PPS) * int64(c.Duration) / int64(time.Second))
	gap := time.Second / time.Duration(c.PPS)
	// A packet sent late must not spill into the next interval: the run's
	// intervals hold exactly the generated traffic.
	stop := start.Add(c.Duration - time.Millisecond)
	for i := 0; i < total && ctx.Err() == nil; i++ {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 50*time.Microsecond {
			time.Sleep(d)
		}
		if time.Now().After(stop) {
			break
		}
		f := &flows[sort.SearchFloat64s(cum, rng.Float64()*cum[len(cum)-1])]
		payload := 8 + rng.IntN(c.MaxPayload-8)
		if rng.Float64() < c.FullShare {
			payload = c.MaxPayload
		}
		n := f.fill(frame, payload, uint64(i))
		for {
			_, err := unix.Write(fd, frame[:n])
			if err == nil {
				st.Sent++
				break
			}
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			st.SendErrors++
			break
		}
	}
	st.End = time.Now()
	return st, ctx.Err()
}

// makeFlows draws the flows and the cumulative weights by which each
// packet picks its flow: Pareto(shape) weights give a few heavy flows and
// many light ones, as on real links.
func makeFlows(c TrafficConfig, rng *rand.Rand) ([]genFlow, []float64) {
	dsts := []netip.Addr{DstAddr}
	for _, a := range dstExtra {
		dsts = append(dsts, netip.MustParseAddr(a))
	}
	tcpPorts := []uint16{443, 80, 8080, 5201}
	udpPorts := []uint16{53, 443, 4789, 5004}
	flows := make([]genFlow, c.Flows)
	cum := make([]float64, c.Flows)
	used := map[[3]uint16]bool{}
	sum := 0.0
	for i := range flows {
		f := &flows[i]
		f.tcp = rng.Float64() >= c.UDPShare
		di := rng.IntN(len(dsts))
		f.dst = dsts[di].As4()
		for {
			f.sport = uint16(20000 + rng.IntN(40000))
			if f.tcp {
				f.dport = tcpPorts[rng.IntN(len(tcpPorts))]
			} else {
				f.dport = udpPorts[rng.IntN(len(udpPorts))]
			}
			k := [3]uint16{f.sport, f.dport, uint16(di)}
			if !used[k] {
				used[k] = true
				break
			}
		}
		f.seq, f.ack, f.ipid = rng.Uint32(), rng.Uint32(), uint16(rng.Uint32())
		w := math.Min(math.Pow(1-rng.Float64(), -1/c.ParetoShape), 1e4)
		sum += w
		cum[i] = sum
	}
	return flows, cum
}

// fill writes the IPv4 and L4 headers and the payload of the flow's next
// packet after the Ethernet header and returns the frame length. The
// first 8 payload bytes carry a counter so that no two packets share an
// identity (the join needs unique packets).
func (f *genFlow) fill(b []byte, payload int, counter uint64) int {
	l4len := 8
	proto := byte(17)
	if f.tcp {
		l4len, proto = 20, 6
	}
	ip := b[14:]
	ipLen := 20 + l4len + payload
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	f.ipid++
	binary.BigEndian.PutUint16(ip[4:], f.ipid)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = 64, proto
	ip[10], ip[11] = 0, 0
	s := SrcAddr.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], f.dst[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	l4 := ip[20:]
	binary.BigEndian.PutUint16(l4[0:], f.sport)
	binary.BigEndian.PutUint16(l4[2:], f.dport)
	if f.tcp {
		binary.BigEndian.PutUint32(l4[4:], f.seq)
		binary.BigEndian.PutUint32(l4[8:], f.ack)
		l4[12], l4[13] = 5<<4, 0x18 // data offset 5, PSH|ACK
		binary.BigEndian.PutUint16(l4[14:], 64240)
		binary.BigEndian.PutUint32(l4[16:], 0) // checksum (not part of identity), urgent pointer
		f.seq += uint32(payload)
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(8+payload))
		binary.BigEndian.PutUint16(l4[6:], 0) // no checksum: legal for UDP over IPv4
	}
	p := l4[l4len : l4len+payload]
	binary.BigEndian.PutUint64(p, counter)
	clear(p[8:])
	return 14 + ipLen
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
