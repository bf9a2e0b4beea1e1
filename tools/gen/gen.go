package gen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/heapq"
	"github.com/lds-net/lds/tools/truth"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Outputs names the files Generate writes. SenderPcap and ReceiverPcap are
// required; Truth may be empty (no truth file). OnPacket, when set, is called
// for every packet in send order (for tests and custom truth); the pointer is
// only valid during the call.
type Outputs struct {
	SenderPcap   string
	ReceiverPcap string
	Truth        string
	OnPacket     func(p *PacketTruth)
}

// PacketTruth is the fate of one packet.
type PacketTruth struct {
	Flow     int // flow index, 0..Flows-1
	Key      *capture.FlowKey
	Interval int64
	SendNS   int64
	RecvNS   int64 // 0 when lost
	Lost     bool
	WireLen  int // sender-tap frame length on the wire
	Counter  uint64
	IPID     uint16 // the IPv4 identification (IPv4 packets)
	Seq      uint32 // the TCP sequence number (TCP packets)
}

// Summary reports what a run produced.
type Summary struct {
	Flows        int
	Packets      int64 // sent (sender-tap packets)
	Received     int64 // receiver-tap packets
	Lost         int64
	Reordered    int64 // receiver-tap packets sent before a packet received ahead of them
	Intervals    int   // intervals with at least one packet sent
	TruthRecords int
	FirstSendNS  int64
	LastSendNS   int64
	LastRecvNS   int64
	MaxDelayNS   int64 // largest delay drawn
	Headers      HeaderChanges
	Elapsed      time.Duration
}

// flow is the generator's state of one flow.
type flow struct {
	idx       int32
	key       capture.FlowKey
	src, dst  [16]byte // IPv4 in the first 4 bytes
	srcS      string
	dstS      string
	v6        bool
	proto     uint8
	sport     uint16
	dport     uint16
	ttl       uint8
	tos       uint8 // DSCP<<2 | ECN at the sender
	rxTOS     uint8 // the same after DSCP remarking (ECN CE is per packet)
	ect       bool
	flowLabel uint32
	window    uint16
	class     int
	word      uint64 // the flow's random word (per-flow delay choices)
	heavy     bool
	heavyP    float64    // the heavy flow's extra loss probability
	macA      [2][6]byte // dst, src at the sender tap
	macB      [2][6]byte // dst, src at the receiver tap

	n, emitted int64
	startNS    int64 // relative to the trace start
	lifeNS     int64
	u          float64 // last order statistic of the flow's send times in [0, 1)
	nextNS     int64   // next send time, relative

	ipid    uint16
	seq     uint32
	ack     uint32
	icmpSeq uint16

	acc      acc // current interval
	accTouch bool
}

// pending is a received packet waiting for its turn in receive order.
type pending struct {
	recvNS int64
	sendNS int64
	seq    uint64
	wire   int
	n      int
	buf    []byte
}

type writer interface {
	WritePacket(ci gopacket.CaptureInfo, data []byte) error
}

type capFile struct {
	f  *os.File
	bw *bufio.Writer
	w  writer
	ng *pcapgo.NgWriter
}

func createCap(path, format string, snap int) (*capFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create capture: %w", err)
	}
	c := &capFile{f: f, bw: bufio.NewWriterSize(f, 1<<20)}
	if format == "pcapng" {
		intf := pcapgo.DefaultNgInterface
		intf.LinkType = layers.LinkTypeEthernet
		intf.SnapLength = uint32(snap)
		intf.Name = "lds-gen"
		ng, err := pcapgo.NewNgWriterInterface(c.bw, intf, pcapgo.DefaultNgWriterOptions)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("write pcapng header to %s: %w", path, err)
		}
		c.w, c.ng = ng, ng
		return c, nil
	}
	w := pcapgo.NewWriterNanos(c.bw)
	s := uint32(snap)
	if s == 0 {
		s = 65535
	}
	if err := w.WriteFileHeader(s, layers.LinkTypeEthernet); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("write pcap header to %s: %w", path, err)
	}
	c.w = w
	return c, nil
}

func (c *capFile) close() error {
	var err error
	if c.ng != nil {
		err = c.ng.Flush()
	}
	if e := c.bw.Flush(); err == nil {
		err = e
	}
	if e := c.f.Close(); err == nil {
		err = e
	}
	return err
}

// Generate writes the scenario's sender-tap and receiver-tap captures and its
// ground truth. It is deterministic: the same scenario gives byte-identical
// files. It streams, so memory grows with the number of flows only.
func Generate(ctx context.Context, sc Scenario, out Outputs, log *slog.Logger) (Summary, error) {
	if err := sc.Validate(); err != nil {
		return Summary{}, fmt.Errorf("invalid scenario: %w", err)
	}
	if out.SenderPcap == "" || out.ReceiverPcap == "" {
		return Summary{}, fmt.Errorf("outputs: sender and receiver capture paths are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g, err := newGenerator(sc, log)
	if err != nil {
		return Summary{}, err
	}
	began := time.Now()
	sum, err := g.run(ctx, out)
	sum.Elapsed = time.Since(began)
	if err != nil {
		return sum, err
	}
	log.Info("generated trace", "scenario", sc.Name, "flows", sum.Flows, "packets", sum.Packets,
		"received", sum.Received, "lost", sum.Lost, "reordered", sum.Reordered,
		"intervals", sum.Intervals, "elapsed", sum.Elapsed)
	return sum, nil
}

type generator struct {
	sc      Scenario
	log     *slog.Logger
	hdr     HeaderChanges
	flows   []flow
	delays  []*delaySampler
	losses  []lossState
	rng     *rand.Rand // per-packet draws, in send order
	vlanA   int        // -1: untagged
	vlanB   int
	snapA   int
	snapB   int
	durNS   int64
	ivNS    int64
	maxDNS  int64
	touched []int32
}

func newGenerator(sc Scenario, log *slog.Logger) (*generator, error) {
	setup := rand.New(rand.NewPCG(sc.Seed, 0x6c64732d7365747))
	g := &generator{
		sc:     sc,
		log:    log,
		rng:    rand.New(rand.NewPCG(sc.Seed, 0x6c64732d706b74)),
		durNS:  int64(sc.Duration),
		ivNS:   int64(sc.Interval),
		maxDNS: int64(sc.MaxDelay),
	}
	g.hdr = resolveHeaders(sc.Headers, setup)
	g.vlanA, g.vlanB = -1, -1
	switch g.hdr.VLAN {
	case VLANPush:
		g.vlanB = 100
	case VLANPop:
		g.vlanA = 10
	case VLANRetag:
		g.vlanA, g.vlanB = 10, 20
	}
	g.snapA = sc.SnapLen
	g.snapB = sc.ReceiverSnapLen
	if g.snapB == 0 {
		g.snapB = g.snapA
	}
	var salt uint64
	for i := range sc.Classes {
		g.delays = append(g.delays, compileDelay(&sc.Classes[i].Delay, &salt, setup))
		g.losses = append(g.losses, lossState{m: sc.Classes[i].Loss})
	}
	if err := g.makeFlows(setup); err != nil {
		return nil, err
	}
	return g, nil
}

// resolveHeaders draws the header changes when Random is set.
func resolveHeaders(h HeaderChanges, rng *rand.Rand) HeaderChanges {
	if !h.Random {
		if h.VLAN == "" {
			h.VLAN = VLANNone
		}
		return h
	}
	coin := func() bool { return rng.IntN(2) == 0 }
	fracOrZero := func() float64 {
		if coin() {
			return 0.05 + 0.45*rng.Float64()
		}
		return 0
	}
	r := HeaderChanges{Random: true}
	r.TTLDecrement = coin()
	r.MACRewrite = coin()
	r.ECNCE = fracOrZero()
	r.DSCPRemark = fracOrZero()
	r.L4ChecksumOffload = fracOrZero()
	r.VLAN = []string{VLANNone, VLANPush, VLANPop, VLANRetag}[rng.IntN(4)]
	return r
}

// flowSizes draws the packets per flow, rescaled toward RatePPS*Duration.
func (g *generator) flowSizes(rng *rand.Rand) []int64 {
	sc := g.sc
	n := sc.Flows
	sizes := make([]int64, n)
	if sc.FlowSize.Dist == "fixed" {
		for i := range sizes {
			sizes[i] = int64(sc.FlowSize.Sizes[i%len(sc.FlowSize.Sizes)])
		}
		return sizes
	}
	raw := make([]float64, n)
	for i := range raw {
		raw[i] = sc.FlowSize.Scale * math.Pow(1-rng.Float64(), -1/sc.FlowSize.Shape)
	}
	capN := float64(sc.FlowSize.Max)
	at := func(f float64) int64 {
		var s int64
		for i, r := range raw {
			v := math.Max(1, math.Round(r*f))
			if capN > 0 {
				v = math.Min(v, capN)
			}
			sizes[i] = int64(v)
			s += sizes[i]
		}
		return s
	}
	if sc.RatePPS <= 0 {
		at(1)
		return sizes
	}
	target := int64(math.Round(sc.RatePPS * sc.Duration.Seconds()))
	// The total is monotone in the factor: bisect it.
	lo, hi := 0.0, 1.0
	for at(hi) < target && hi < 1e12 {
		lo, hi = hi, hi*2
	}
	for range 60 {
		mid := (lo + hi) / 2
		if at(mid) < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	if got := at(hi); float64(got) < 0.99*float64(target) {
		g.log.Warn("flow sizes cannot reach the target packet count (flow_size.max caps them)",
			"target", target, "got", got)
	}
	return sizes
}

var (
	tcpPorts = []uint16{443, 443, 443, 80, 80, 22, 8080, 993, 25, 3389}
	udpPorts = []uint16{53, 53, 123, 443, 4789, 5060, 500, 3478}
	dscps    = []uint8{0, 0, 0, 0, 10, 18, 26, 34, 46}
)

func (g *generator) makeFlows(rng *rand.Rand) error {
	sc := g.sc
	sizes := g.flowSizes(rng)
	var cw []float64
	var wsum float64
	for _, c := range sc.Classes {
		wsum += c.Weight
	}
	acc := 0.0
	for _, c := range sc.Classes {
		acc += c.Weight / wsum
		cw = append(cw, acc)
	}
	t := sc.Traffic
	psum := t.TCP + t.UDP + t.ICMP
	seen := make(map[capture.FlowKey]struct{}, sc.Flows)
	g.flows = make([]flow, sc.Flows)
	lmin, lmax := math.Log(float64(sc.Lifetime.Min)), math.Log(float64(sc.Lifetime.Max))
	routerA := [6]byte{0x02, 0xaa, 0, 0, 0, 1}
	routerB := [6]byte{0x02, 0xbb, 0, 0, 0, 1}
	for i := range g.flows {
		f := &g.flows[i]
		f.idx = int32(i)
		f.n = sizes[i]
		f.startNS = rng.Int64N(g.durNS)
		life := int64(math.Exp(lmin + rng.Float64()*(lmax-lmin)))
		f.lifeNS = max(1, min(life, g.durNS-f.startNS))
		u := rng.Float64()
		f.class = len(cw) - 1
		for c, x := range cw {
			if u < x {
				f.class = c
				break
			}
		}
		f.v6 = rng.Float64() < t.IPv6
		pu := rng.Float64() * psum
		switch {
		case pu < t.TCP:
			f.proto = protoTCP
		case pu < t.TCP+t.UDP:
			f.proto = protoUDP
		default:
			f.proto = protoICMP
			if f.v6 {
				f.proto = protoICMPv6
			}
		}
		for attempt := 0; ; attempt++ {
			if attempt > 1000 {
				return fmt.Errorf("cannot draw %d distinct flow keys: too many flows for the address space", sc.Flows)
			}
			g.drawKey(f, rng)
			if _, dup := seen[f.key]; !dup {
				seen[f.key] = struct{}{}
				break
			}
		}
		f.srcS, f.dstS = f.key.SrcAddr().String(), f.key.DstAddr().String()
		f.ttl = []uint8{64, 128, 255}[rng.IntN(3)] - uint8(rng.IntN(16))
		f.ect = f.proto == protoTCP && rng.Float64() < t.ECT
		dscp := dscps[rng.IntN(len(dscps))]
		f.tos = dscp << 2
		if f.ect {
			f.tos |= 0b10
		}
		f.rxTOS = f.tos
		if rng.Float64() < g.hdr.DSCPRemark {
			nd := uint8(0)
			if dscp == 0 {
				nd = 8 // CS1: scavenger
			}
			f.rxTOS = nd<<2 | f.tos&3
		}
		if f.v6 {
			f.flowLabel = rng.Uint32() & 0xfffff
		}
		f.window = uint16(1024 + rng.IntN(64512))
		f.word = rng.Uint64()
		f.heavy = rng.Float64() < sc.HeavyLoss.Fraction
		f.heavyP = sc.HeavyLoss.P
		if f.heavy && sc.HeavyLoss.PMax > sc.HeavyLoss.P {
			// Drawn only here, so that scenarios without p_max keep their packets.
			f.heavyP += rng.Float64() * (sc.HeavyLoss.PMax - sc.HeavyLoss.P)
		}
		f.ipid = uint16(rng.Uint32())
		f.seq = rng.Uint32()
		f.ack = rng.Uint32()
		f.icmpSeq = 1
		host := [6]byte{0x02, 0x10, byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}
		next := [6]byte{0x02, 0x20, 0, 0, 0, byte(1 + rng.IntN(4))}
		f.macA = [2][6]byte{routerA, host}
		f.macB = f.macA
		if g.hdr.MACRewrite {
			f.macB = [2][6]byte{next, routerB}
		}
	}
	return nil
}

func (g *generator) drawKey(f *flow, rng *rand.Rand) {
	if f.v6 {
		f.src = [16]byte{0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0a}
		f.dst = [16]byte{0x20, 0x01, 0x0d, 0xb8, 0x00, 0x0b}
		for j := 8; j < 16; j++ {
			f.src[j] = byte(rng.Uint32())
		}
		f.dst[15] = byte(1 + rng.IntN(250))
		f.dst[14] = byte(rng.IntN(4))
	} else {
		f.src = [16]byte{10, byte(rng.Uint32()), byte(rng.Uint32()), byte(1 + rng.IntN(254))}
		nets := [][2]byte{{203, 0}, {198, 51}, {192, 0}}
		nw := nets[rng.IntN(3)]
		third := byte(113)
		switch nw[0] {
		case 198:
			third = 100
		case 192:
			third = 2
		}
		f.dst = [16]byte{nw[0], nw[1], third, byte(1 + rng.IntN(254))}
	}
	switch f.proto {
	case protoTCP:
		f.sport = uint16(32768 + rng.IntN(28232))
		f.dport = tcpPorts[rng.IntN(len(tcpPorts))]
	case protoUDP:
		f.sport = uint16(32768 + rng.IntN(28232))
		f.dport = udpPorts[rng.IntN(len(udpPorts))]
	case protoICMP:
		f.sport = 8 << 8 // echo request, code 0
		f.dport = uint16(rng.Uint32())
	case protoICMPv6:
		f.sport = 128 << 8
		f.dport = uint16(rng.Uint32())
	}
	f.key = capture.FlowKey{Src: f.src, Dst: f.dst, SPort: f.sport, DPort: f.dport, Proto: f.proto, V6: f.v6}
}

// advance draws the flow's next send time: its packets' times are the order
// statistics of n uniform draws over its lifetime, produced one at a time in
// increasing order (u' = u + (1-u)(1 - V^(1/k)), k packets left), so a flow
// needs no per-packet memory.
func (f *flow) advance(rng *rand.Rand) {
	k := float64(f.n - f.emitted)
	v := 1 - rng.Float64() // (0, 1]
	f.u += (1 - f.u) * -math.Expm1(math.Log(v)/k)
	if f.u >= 1 {
		f.u = math.Nextafter(1, 0)
	}
	f.nextNS = f.startNS + int64(f.u*float64(f.lifeNS))
}

func (g *generator) flowLess(a, b int32) bool {
	fa, fb := &g.flows[a], &g.flows[b]
	if fa.nextNS != fb.nextNS {
		return fa.nextNS < fb.nextNS
	}
	return a < b
}

// siftDown restores the flow heap below i (flows ordered by next send time).
func (g *generator) siftDown(h []int32, i int) {
	heapq.Down(h, i, func(a, b *int32) bool { return g.flowLess(*a, *b) })
}

func pendLess(a, b *pending) bool {
	if a.recvNS != b.recvNS {
		return a.recvNS < b.recvNS
	}
	return a.seq < b.seq
}

func pendPush(h []pending, p pending) []pending { return heapq.Push(h, p, pendLess) }

func pendPop(h []pending) ([]pending, pending) { return heapq.Pop(h, pendLess) }

// runState is one run's outputs and the state of its event loop.
type runState struct {
	g      *generator
	out    Outputs
	sum    Summary
	capA   *capFile
	capB   *capFile
	truthF *os.File
	truthW *bufio.Writer

	bufA        []byte       // the sender frame being built
	snapB       int          // receiver-tap snap length (maxFrame for none)
	free        [][]byte     // receiver frame buffers to reuse
	pend        []pending    // receiver frames not yet written, by receive time
	maxSentSeen int64        // latest send time of a receiver frame written
	curIv       int64        // the interval whose truth is being accumulated
	rec         truth.Record // scratch of flushTruth
	line        []byte       // scratch of flushTruth
	pt          PacketTruth  // scratch of OnPacket
	sp          pktSpec      // the packet being built
	counter     uint64       // packets sent so far
}

func (g *generator) run(ctx context.Context, out Outputs) (sum Summary, err error) {
	s, err := g.openRun(out)
	if err != nil {
		return Summary{Flows: len(g.flows), Headers: g.hdr}, err
	}
	defer func() {
		if e := s.close(); e != nil && err == nil {
			err = e
		}
		sum = s.sum
	}()
	h := g.flowHeap()
	sc := g.sc
	s.sum.FirstSendNS = -1
	for len(h) > 0 {
		if s.counter&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return sum, fmt.Errorf("generation stopped after %d packets: %w", s.counter, err)
			}
		}
		fi := h[0]
		f := &g.flows[fi]
		sendNS := sc.StartNS + f.nextNS
		iv := sendNS / g.ivNS
		if iv != s.curIv {
			if err := s.flushTruth(); err != nil {
				return sum, err
			}
			s.curIv = iv
		}
		if err := s.deliverUntil(sendNS); err != nil {
			return sum, err
		}
		if err := s.packet(fi, sendNS, iv); err != nil {
			return sum, err
		}
		f.emitted++
		if f.emitted < f.n {
			f.advance(g.rng)
			g.siftDown(h, 0)
		} else {
			last := len(h) - 1
			h[0] = h[last]
			h = h[:last]
			g.siftDown(h, 0)
		}
	}
	if err := s.flushTruth(); err != nil {
		return sum, err
	}
	return sum, s.deliverUntil(math.MaxInt64)
}

// openRun creates the run's output files.
func (g *generator) openRun(out Outputs) (*runState, error) {
	s := &runState{g: g, out: out, bufA: make([]byte, maxFrame), snapB: g.snapB, maxSentSeen: math.MinInt64, curIv: math.MinInt64}
	s.sum.Flows = len(g.flows)
	s.sum.Headers = g.hdr
	if s.snapB == 0 {
		s.snapB = maxFrame
	}
	var err error
	if s.capA, err = createCap(out.SenderPcap, g.sc.Format, g.snapA); err != nil {
		return nil, err
	}
	if s.capB, err = createCap(out.ReceiverPcap, g.sc.Format, g.snapB); err != nil {
		_ = s.capA.close()
		return nil, err
	}
	if out.Truth != "" {
		if s.truthF, err = os.Create(out.Truth); err != nil {
			_ = s.capA.close()
			_ = s.capB.close()
			return nil, fmt.Errorf("create truth file: %w", err)
		}
		s.truthW = bufio.NewWriterSize(s.truthF, 1<<20)
	}
	return s, nil
}

// close flushes and closes the output files and returns the first error.
func (s *runState) close() error {
	var err error
	for _, c := range []*capFile{s.capA, s.capB} {
		if e := c.close(); e != nil && err == nil {
			err = fmt.Errorf("close capture: %w", e)
		}
	}
	if s.truthF != nil {
		if e := s.truthW.Flush(); e != nil && err == nil {
			err = fmt.Errorf("write truth: %w", e)
		}
		if e := s.truthF.Close(); e != nil && err == nil {
			err = fmt.Errorf("close truth: %w", e)
		}
	}
	return err
}

// flowHeap returns the flows in a heap by their first send time.
func (g *generator) flowHeap() []int32 {
	h := make([]int32, 0, len(g.flows))
	for i := range g.flows {
		g.flows[i].advance(g.rng)
		h = append(h, int32(i))
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		g.siftDown(h, i)
	}
	return h
}

// deliverUntil writes the receiver frames received at or before ns.
func (s *runState) deliverUntil(ns int64) error {
	for len(s.pend) > 0 && s.pend[0].recvNS <= ns {
		var p pending
		s.pend, p = pendPop(s.pend)
		if err := s.writeB(p); err != nil {
			return err
		}
	}
	return nil
}

// writeB writes one receiver frame.
func (s *runState) writeB(p pending) error {
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, p.recvNS), CaptureLength: p.n, Length: p.wire}
	if err := s.capB.w.WritePacket(ci, p.buf[:p.n]); err != nil {
		return fmt.Errorf("write receiver capture: %w", err)
	}
	if p.sendNS < s.maxSentSeen {
		s.sum.Reordered++
	}
	s.maxSentSeen = max(s.maxSentSeen, p.sendNS)
	s.sum.LastRecvNS = p.recvNS
	s.free = append(s.free, p.buf)
	return nil
}

// flushTruth writes the truth records of the current interval's flows.
func (s *runState) flushTruth() error {
	if s.curIv == math.MinInt64 {
		return nil
	}
	g := s.g
	s.sum.Intervals++
	slices.Sort(g.touched)
	for _, fi := range g.touched {
		f := &g.flows[fi]
		if s.truthW != nil {
			s.rec = truth.Record{Interval: s.curIv, StartNS: s.curIv * g.ivNS,
				Src: f.srcS, Dst: f.dstS, SPort: f.sport, DPort: f.dport, Proto: f.proto,
				Class: g.sc.Classes[f.class].Name, FlowPkts: f.n}
			f.acc.record(&s.rec)
			b, err := json.Marshal(&s.rec)
			if err != nil {
				return fmt.Errorf("encode truth: %w", err)
			}
			s.line = append(s.line[:0], b...)
			s.line = append(s.line, '\n')
			if _, err := s.truthW.Write(s.line); err != nil {
				return fmt.Errorf("write truth: %w", err)
			}
			s.sum.TruthRecords++
		}
		f.acc.reset()
		f.accTouch = false
	}
	g.touched = g.touched[:0]
	return nil
}

// packet emits flow fi's next packet at sendNS: the sender frame, its fate,
// the receiver frame (queued until its receive time) and OnPacket.
func (s *runState) packet(fi int32, sendNS, iv int64) error {
	g := s.g
	f := &g.flows[fi]
	rng := g.rng
	ipLen, l4ck, etherType, wireA, err := s.writeSender(f, sendNS)
	if err != nil {
		return err
	}
	lost := g.losses[f.class].lost(rng)
	if f.heavy && rng.Float64() < f.heavyP {
		lost = true
	}
	if !f.accTouch {
		f.accTouch = true
		g.touched = append(g.touched, fi)
	}
	f.acc.sent++
	s.sum.Packets++
	if s.sum.FirstSendNS < 0 {
		s.sum.FirstSendNS = sendNS
	}
	s.sum.LastSendNS = sendNS
	var recvNS int64
	if lost {
		s.sum.Lost++
	} else {
		recvNS = s.receive(f, sendNS, ipLen, l4ck, etherType)
	}
	if s.out.OnPacket != nil {
		s.pt = PacketTruth{Flow: int(fi), Key: &f.key, Interval: iv, SendNS: sendNS, RecvNS: recvNS,
			Lost: lost, WireLen: wireA, Counter: s.counter, IPID: s.sp.ipid, Seq: s.sp.seq}
		s.out.OnPacket(&s.pt)
	}
	s.counter++
	return nil
}

// writeSender builds flow f's next packet in bufA and writes it to the
// sender capture. It returns the IP length, the L4 checksum, the
// EtherType and the frame's wire length.
func (s *runState) writeSender(f *flow, sendNS int64) (ipLen int, l4ck uint16, etherType uint16, wireA int, err error) {
	g := s.g
	rng, t, hdr := g.rng, g.sc.Traffic, g.hdr
	pl := t.MaxPayload
	if rng.Float64() >= t.Full {
		pl = t.MinPayload + rng.IntN(t.MaxPayload-t.MinPayload+1)
	}
	if f.proto != protoTCP {
		pl = max(pl, 8)
	}
	s.sp = pktSpec{payloadLen: pl, counter: s.counter, ipid: f.ipid, seq: f.seq, ack: f.ack,
		icmpSeq: f.icmpSeq, tos: f.tos,
		offload: (f.proto == protoTCP || f.proto == protoUDP) && hdr.L4ChecksumOffload > 0 && rng.Float64() < hdr.L4ChecksumOffload}
	ipLen, l4ck = buildIP(s.bufA, f, &s.sp)
	f.ipid++
	f.seq += uint32(pl)
	f.ack += 1 + uint32(rng.IntN(3000))
	f.icmpSeq++
	etherType = 0x0800
	if f.v6 {
		etherType = 0x86dd
	}
	offA := writeL2(s.bufA, f.macA[0], f.macA[1], g.vlanA, etherType)
	wireA = l2Room - offA + ipLen
	capLenA := wireA
	if g.snapA > 0 {
		capLenA = min(wireA, g.snapA)
	}
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, sendNS), CaptureLength: capLenA, Length: wireA}
	if err := s.capA.w.WritePacket(ci, s.bufA[offA:offA+capLenA]); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("write sender capture: %w", err)
	}
	return ipLen, l4ck, etherType, wireA, nil
}

// receive draws the delivered packet's delay, builds its receiver frame
// from the sender's and queues it. It returns the receive time.
func (s *runState) receive(f *flow, sendNS int64, ipLen int, l4ck, etherType uint16) int64 {
	g := s.g
	rng, hdr := g.rng, g.hdr
	d := g.delays[f.class].boundedDelay(rng, f.word, f.nextNS, g.maxDNS)
	s.sum.MaxDelayNS = max(s.sum.MaxDelayNS, d)
	recvNS := sendNS + d
	f.acc.add(float64(d))
	s.sum.Received++
	rxTOS := f.rxTOS
	if f.ect && hdr.ECNCE > 0 && rng.Float64() < hdr.ECNCE {
		rxTOS |= 0b11
	}
	var buf []byte
	if n := len(s.free); n > 0 {
		buf, s.free = s.free[n-1], s.free[:n-1]
	} else {
		buf = make([]byte, maxFrame)
	}
	l2B := l2Room
	if g.vlanB < 0 {
		l2B = ethHdrLen
	}
	wireB := l2B + ipLen
	capB := min(wireB, s.snapB)
	offB := writeL2(buf, f.macB[0], f.macB[1], g.vlanB, etherType)
	rewriteForReceiver(buf[l2Room:], s.bufA[l2Room:], capB-l2B, f, hdr.TTLDecrement, rxTOS, l4ck, s.sp.offload)
	if offB > 0 {
		// Untagged: shift the frame to the buffer's start so buf[:n] is it.
		copy(buf, buf[offB:offB+capB])
	}
	s.pend = pendPush(s.pend, pending{recvNS: recvNS, sendNS: sendNS, seq: s.counter, wire: wireB, n: capB, buf: buf})
	return recvNS
}
