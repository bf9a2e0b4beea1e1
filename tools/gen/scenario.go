// Package gen generates a pair of captures of the same traffic at two taps of
// a link — the sender tap (sorted by send time) and the receiver tap (sorted
// by receive time) — together with the exact ground truth per (interval,
// flow): packets sent, received, lost, mean and standard deviation of the
// one-way delay. Everything is a deterministic function of the Scenario
// (including its seed), so a run can be reproduced from its YAML alone.
//
// The generator streams: flows emit their packets in send-time order through
// a heap, received packets wait in a second heap only as long as the maximum
// delay, and truth is written interval by interval. Memory is bounded by the
// number of flows, not the number of packets.
package gen

import (
	"errors"
	"fmt"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lds-net/lds/internal/config"
)

// Scenario describes one synthetic two-tap trace. Every field has a default
// (see DefaultScenario); a YAML file only needs the keys it changes, because
// LoadScenario decodes over the defaults.
type Scenario struct {
	Name     string        `yaml:"name"`
	Seed     uint64        `yaml:"seed"`     // every random draw derives from it
	StartNS  int64         `yaml:"start_ns"` // Unix ns of the trace start
	Duration time.Duration `yaml:"duration"` // send times fall in [start, start+duration)
	Interval time.Duration `yaml:"interval"` // T of docs/config.md: interval id = floor(send_ns / T)
	MaxDelay time.Duration `yaml:"max_delay"`
	Flows    int           `yaml:"flows"`
	// RatePPS is the target aggregate packet rate. When > 0 the drawn flow
	// sizes are rescaled so that the total is close to RatePPS*Duration; 0
	// keeps the sizes as drawn.
	RatePPS  float64  `yaml:"rate_pps"`
	FlowSize FlowSize `yaml:"flow_size"`
	Lifetime Lifetime `yaml:"lifetime"`
	Traffic  Traffic  `yaml:"traffic"`
	// Classes split the flows (by Weight) into groups that share a delay and
	// a loss model. At least one.
	Classes   []Class       `yaml:"classes"`
	HeavyLoss HeavyLoss     `yaml:"heavy_loss"`
	Headers   HeaderChanges `yaml:"header_changes"`
	// SnapLen is how many bytes of each frame the sender tap writes (0 =
	// whole frame); the wire length is always recorded. ReceiverSnapLen is
	// the same for the receiver tap (0 = same as SnapLen): the taps may
	// differ, as real ones do.
	SnapLen         int    `yaml:"snaplen"`
	ReceiverSnapLen int    `yaml:"receiver_snaplen"`
	Format          string `yaml:"format"` // "pcap" (nanosecond) or "pcapng"
}

// FlowSize is the distribution of packets per flow.
type FlowSize struct {
	Dist  string  `yaml:"dist"`            // "pareto" or "fixed"
	Shape float64 `yaml:"shape"`           // pareto shape (alpha)
	Scale float64 `yaml:"scale"`           // pareto scale: the minimum size, packets
	Max   int     `yaml:"max"`             // cap on one flow's size (0 = none)
	Sizes []int   `yaml:"sizes,omitempty"` // fixed: sizes used in turn, flow i gets Sizes[i % len]
}

// Lifetime bounds how long a flow lasts: drawn log-uniformly in [Min, Max]
// and cut at the end of the trace. Flow starts are uniform over the trace.
type Lifetime struct {
	Min time.Duration `yaml:"min"`
	Max time.Duration `yaml:"max"`
}

// Traffic is the protocol mix and the payload sizes.
type Traffic struct {
	IPv6 float64 `yaml:"ipv6"` // fraction of flows over IPv6
	TCP  float64 `yaml:"tcp"`  // relative weights of the transport protocols
	UDP  float64 `yaml:"udp"`
	ICMP float64 `yaml:"icmp"` // echo requests (ICMP or ICMPv6)
	// Payload bytes per packet: Full of the packets carry MaxPayload bytes,
	// the rest a uniform size in [MinPayload, MaxPayload]. UDP and ICMP
	// carry at least 8 bytes (a counter that keeps packets distinct).
	MinPayload int     `yaml:"min_payload"`
	MaxPayload int     `yaml:"max_payload"`
	Full       float64 `yaml:"full"`
	ECT        float64 `yaml:"ect"` // fraction of flows sending ECN-capable (ECT(0)) packets
}

// Class is a group of flows with one delay model and one loss model.
type Class struct {
	Name   string     `yaml:"name"`
	Weight float64    `yaml:"weight"` // share of the flows (relative)
	Delay  DelayModel `yaml:"delay"`
	Loss   LossModel  `yaml:"loss"`
}

// Delay model kinds.
const (
	DelayConstant = "constant" // Value
	DelayUniform  = "uniform"  // Min..Max
	DelayWeibull  = "weibull"  // Offset + Weibull(Shape, Scale)
	DelayPareto   = "pareto"   // Offset + Pareto(Shape, Scale)
	DelayBimodal  = "bimodal"  // A with probability P, else B; per packet or per flow
	DelayPriority = "priority" // two strict-priority queues, see DelayModel
	DelayECMP     = "ecmp"     // per-flow path (by Weight) with its Base delay, plus Jitter
)

// DelayModel is a one-way delay distribution. Which fields matter depends on
// Kind (see the Delay* constants). Every sample is kept in (0, max_delay):
// a draw outside is redrawn a few times and then clamped.
type DelayModel struct {
	Kind   string        `yaml:"kind"`
	Value  time.Duration `yaml:"value,omitempty"`
	Min    time.Duration `yaml:"min,omitempty"`
	Max    time.Duration `yaml:"max,omitempty"`
	Offset time.Duration `yaml:"offset,omitempty"`
	Shape  float64       `yaml:"shape,omitempty"`
	Scale  time.Duration `yaml:"scale,omitempty"`
	// bimodal: mode A with probability P, else mode B; PerFlow picks the mode
	// once per flow (two paths) instead of per packet (two queue states).
	P       float64     `yaml:"p,omitempty"`
	PerFlow bool        `yaml:"per_flow,omitempty"`
	A       *DelayModel `yaml:"a,omitempty"`
	B       *DelayModel `yaml:"b,omitempty"`
	// priority: HighFraction of the flows use the high-priority queue and see
	// High; the others see Low plus a shared queueing delay that swings
	// between 0 and 2*Queue over Period (time-correlated, like a busy queue).
	HighFraction float64       `yaml:"high_fraction,omitempty"`
	High         *DelayModel   `yaml:"high,omitempty"`
	Low          *DelayModel   `yaml:"low,omitempty"`
	Queue        time.Duration `yaml:"queue,omitempty"`
	Period       time.Duration `yaml:"period,omitempty"`
	// ecmp: each flow hashes onto one path; delay = path base + Jitter.
	Paths  []Path      `yaml:"paths,omitempty"`
	Jitter *DelayModel `yaml:"jitter,omitempty"`
}

// Path is one ECMP path.
type Path struct {
	Base   time.Duration `yaml:"base"`
	Weight float64       `yaml:"weight"`
}

// Loss model kinds.
const (
	LossNone    = "none"
	LossUniform = "uniform" // each packet lost with probability P
	LossGilbert = "gilbert" // Gilbert–Elliott: two states, bursty
)

// LossModel is the loss of one class. The Gilbert–Elliott chain is shared by
// all the flows of the class and steps once per packet of the class, so a
// bad state hits a burst of consecutive packets across flows, as a congested
// queue does.
type LossModel struct {
	Kind     string  `yaml:"kind"`
	P        float64 `yaml:"p,omitempty"`
	PGB      float64 `yaml:"p_gb,omitempty"`      // P(good -> bad) per packet
	PBG      float64 `yaml:"p_bg,omitempty"`      // P(bad -> good) per packet
	LossGood float64 `yaml:"loss_good,omitempty"` // loss probability in the good state
	LossBad  float64 `yaml:"loss_bad,omitempty"`  // loss probability in the bad state
}

// HeavyLoss gives a Fraction of the flows (any class) an extra uniform loss P,
// on top of their class's loss: the flows a loss-tolerant sketch must survive.
// With PMax above P each such flow draws its own loss uniformly in
// [P, PMax] (flows that suffer to different degrees, as behind a queue
// that tail-drops); 0 keeps P for all.
type HeavyLoss struct {
	Fraction float64 `yaml:"fraction"`
	P        float64 `yaml:"p"`
	PMax     float64 `yaml:"p_max,omitempty"`
}

// VLAN changes between the taps.
const (
	VLANNone  = "none"
	VLANPush  = "push"  // the receiver tap sees an 802.1Q tag the sender tap did not
	VLANPop   = "pop"   // the sender tap sees a tag the receiver tap does not
	VLANRetag = "retag" // both tagged, different VLAN ids
)

// HeaderChanges are the header rewrites between the taps — exactly the fields
// docs/capture.md ("Packet identity") excludes from packet identity. The
// IPv4 header checksum is always recomputed after a change, as a router
// does.
type HeaderChanges struct {
	// Random, when true, ignores the switches below and enables each change
	// with probability 1/2 (fractions drawn in (0, 0.5]) from the seed.
	Random       bool    `yaml:"random"`
	TTLDecrement bool    `yaml:"ttl_decrement"` // TTL / hop limit - 1
	MACRewrite   bool    `yaml:"mac_rewrite"`   // new source and destination MACs
	ECNCE        float64 `yaml:"ecn_ce"`        // fraction of ECT packets marked CE
	DSCPRemark   float64 `yaml:"dscp_remark"`   // fraction of flows whose DSCP is rewritten
	VLAN         string  `yaml:"vlan"`          // none | push | pop | retag
	// L4ChecksumOffload is the fraction of packets whose L4 checksum the
	// sender tap sees unfinished (checksum offload: only the pseudo-header
	// sum), while the receiver tap sees the final one.
	L4ChecksumOffload float64 `yaml:"l4_checksum_offload"`
}

// DefaultScenario is a small demo: 200 flows, ~20k packets over 5 s, two
// classes (a bimodal one and an ECMP one), a little bursty loss, every header
// change enabled.
func DefaultScenario() Scenario {
	return Scenario{
		Name:     "demo",
		Seed:     1,
		StartNS:  1763000000 * int64(time.Second),
		Duration: 5 * time.Second,
		Interval: time.Second,
		MaxDelay: 50 * time.Millisecond,
		Flows:    200,
		RatePPS:  4000,
		FlowSize: FlowSize{Dist: "pareto", Shape: 1.2, Scale: 3, Max: 5000},
		Lifetime: Lifetime{Min: 10 * time.Millisecond, Max: 5 * time.Second},
		Traffic: Traffic{IPv6: 0.25, TCP: 0.7, UDP: 0.25, ICMP: 0.05,
			MinPayload: 0, MaxPayload: 1400, Full: 0.4, ECT: 0.3},
		Classes: []Class{
			{Name: "bimodal", Weight: 0.7,
				Delay: DelayModel{Kind: DelayBimodal, P: 0.6,
					A: &DelayModel{Kind: DelayWeibull, Offset: 500 * time.Microsecond, Shape: 1.5, Scale: 300 * time.Microsecond},
					B: &DelayModel{Kind: DelayWeibull, Offset: 4 * time.Millisecond, Shape: 2, Scale: 1 * time.Millisecond}},
				Loss: LossModel{Kind: LossGilbert, PGB: 0.001, PBG: 0.2, LossGood: 0, LossBad: 0.5}},
			{Name: "ecmp", Weight: 0.3,
				Delay: DelayModel{Kind: DelayECMP,
					Paths:  []Path{{Base: 1 * time.Millisecond, Weight: 1}, {Base: 2500 * time.Microsecond, Weight: 1}},
					Jitter: &DelayModel{Kind: DelayPareto, Shape: 2.5, Scale: 50 * time.Microsecond}},
				Loss: LossModel{Kind: LossUniform, P: 0.001}},
		},
		HeavyLoss: HeavyLoss{Fraction: 0.02, P: 0.2},
		Headers: HeaderChanges{TTLDecrement: true, MACRewrite: true, ECNCE: 0.1,
			DSCPRemark: 0.2, VLAN: VLANPush, L4ChecksumOffload: 0.3},
		SnapLen: 256, // lds needs the link header (+ 4 per VLAN tag) + capture.identity.ip_bytes (82)
		Format:  "pcap",
	}
}

// LoadScenario reads a YAML scenario over DefaultScenario: keys the file
// leaves out keep their defaults (a list, such as classes, is replaced whole).
func LoadScenario(path string) (Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("read scenario: %w", err)
	}
	return ParseScenario(b)
}

// ParseScenario decodes YAML over DefaultScenario and validates the result.
func ParseScenario(b []byte) (Scenario, error) {
	sc := DefaultScenario()
	var probe struct {
		Classes []Class `yaml:"classes"`
	}
	if err := yaml.Unmarshal(b, &probe); err != nil {
		return Scenario{}, fmt.Errorf("parse scenario YAML: %w", err)
	}
	if probe.Classes != nil {
		sc.Classes = nil // replaced whole, not merged element-wise
	}
	if err := config.DecodeStrict(b, &sc, "every scenario key: docs/gen-eval.md"); err != nil {
		return Scenario{}, fmt.Errorf("scenario: %w", err)
	}
	if err := sc.Validate(); err != nil {
		return Scenario{}, err
	}
	return sc, nil
}

// Validate says what is wrong with a scenario, all problems at once.
func (sc Scenario) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if sc.Duration <= 0 {
		bad("duration must be > 0 (got %v)", sc.Duration)
	}
	if sc.Interval <= 0 {
		bad("interval must be > 0 (got %v)", sc.Interval)
	}
	if sc.MaxDelay <= 0 {
		bad("max_delay must be > 0 (got %v)", sc.MaxDelay)
	}
	if sc.StartNS < 0 {
		bad("start_ns must be >= 0 (got %d)", sc.StartNS)
	}
	if sc.Flows <= 0 {
		bad("flows must be > 0 (got %d)", sc.Flows)
	}
	if sc.RatePPS < 0 {
		bad("rate_pps must be >= 0 (got %v)", sc.RatePPS)
	}
	if sc.RatePPS > 0 && sc.RatePPS*sc.Duration.Seconds() < float64(sc.Flows) {
		bad("rate_pps*duration = %.0f packets is fewer than flows = %d: every flow has at least one packet", sc.RatePPS*sc.Duration.Seconds(), sc.Flows)
	}
	switch sc.FlowSize.Dist {
	case "pareto":
		if sc.FlowSize.Shape <= 0 || sc.FlowSize.Scale <= 0 {
			bad("flow_size: pareto needs shape > 0 and scale > 0 (got %v, %v)", sc.FlowSize.Shape, sc.FlowSize.Scale)
		}
	case "fixed":
		if len(sc.FlowSize.Sizes) == 0 {
			bad("flow_size: fixed needs a non-empty sizes list")
		}
		for _, s := range sc.FlowSize.Sizes {
			if s <= 0 {
				bad("flow_size: sizes must be > 0 (got %d)", s)
				break
			}
		}
	default:
		bad("flow_size.dist must be pareto or fixed (got %q)", sc.FlowSize.Dist)
	}
	if sc.FlowSize.Max < 0 {
		bad("flow_size.max must be >= 0 (got %d)", sc.FlowSize.Max)
	}
	if sc.Lifetime.Min <= 0 || sc.Lifetime.Max < sc.Lifetime.Min {
		bad("lifetime needs 0 < min <= max (got %v, %v)", sc.Lifetime.Min, sc.Lifetime.Max)
	}
	t := sc.Traffic
	if !frac(t.IPv6) || !frac(t.Full) || !frac(t.ECT) {
		bad("traffic: ipv6, full and ect are fractions in [0, 1]")
	}
	if t.TCP < 0 || t.UDP < 0 || t.ICMP < 0 || t.TCP+t.UDP+t.ICMP <= 0 {
		bad("traffic: tcp, udp, icmp are weights >= 0 with a positive sum")
	}
	if t.MinPayload < 0 || t.MaxPayload < t.MinPayload || t.MaxPayload > 1440 || t.MaxPayload < 8 {
		bad("traffic: need 0 <= min_payload <= max_payload, 8 <= max_payload <= 1440 (got %d, %d)", t.MinPayload, t.MaxPayload)
	}
	if len(sc.Classes) == 0 {
		bad("classes: at least one class is needed")
	}
	var wsum float64
	for i, c := range sc.Classes {
		if c.Weight < 0 {
			bad("classes[%d] (%s): weight must be >= 0", i, c.Name)
		}
		wsum += c.Weight
		if err := c.Delay.validate(0); err != nil {
			bad("classes[%d] (%s): delay: %w", i, c.Name, err)
		}
		if err := c.Loss.validate(); err != nil {
			bad("classes[%d] (%s): loss: %w", i, c.Name, err)
		}
	}
	if len(sc.Classes) > 0 && wsum <= 0 {
		bad("classes: the weights must have a positive sum")
	}
	if !frac(sc.HeavyLoss.Fraction) || !frac(sc.HeavyLoss.P) {
		bad("heavy_loss: fraction and p are in [0, 1]")
	}
	if hl := sc.HeavyLoss; hl.PMax != 0 && (!frac(hl.PMax) || hl.PMax < hl.P) {
		bad("heavy_loss: p_max (%v) is 0 (off) or in [p, 1] (p = %v)", hl.PMax, hl.P)
	}
	h := sc.Headers
	if !frac(h.ECNCE) || !frac(h.DSCPRemark) || !frac(h.L4ChecksumOffload) {
		bad("header_changes: ecn_ce, dscp_remark and l4_checksum_offload are fractions in [0, 1]")
	}
	switch h.VLAN {
	case "", VLANNone, VLANPush, VLANPop, VLANRetag:
	default:
		bad("header_changes.vlan must be none, push, pop or retag (got %q)", h.VLAN)
	}
	if sc.SnapLen < 0 || sc.ReceiverSnapLen < 0 {
		bad("snaplen and receiver_snaplen must be >= 0")
	}
	// Ethernet + the smallest capture.identity.ip_bytes lds accepts (48).
	for _, s := range []int{sc.SnapLen, sc.ReceiverSnapLen} {
		if s > 0 && s < minSnapLen {
			bad("snaplen %d is too short: at least %d bytes (Ethernet + the smallest capture.identity.ip_bytes, 48); lds needs the link header + capture.identity.ip_bytes (default 14 + 82 = 96)", s, minSnapLen)
		}
	}
	switch sc.Format {
	case "", "pcap", "pcapng":
	default:
		bad("format must be pcap or pcapng (got %q)", sc.Format)
	}
	return errors.Join(errs...)
}

const minSnapLen = 14 + 48

func frac(v float64) bool { return v >= 0 && v <= 1 }

func (m *DelayModel) validate(depth int) error {
	if depth > 4 {
		return errors.New("delay models nest more than 4 deep")
	}
	sub := func(name string, s *DelayModel) error {
		if s == nil {
			return fmt.Errorf("%s: %s is required", m.Kind, name)
		}
		if err := s.validate(depth + 1); err != nil {
			return fmt.Errorf("%s.%s: %w", m.Kind, name, err)
		}
		return nil
	}
	switch m.Kind {
	case DelayConstant:
		if m.Value <= 0 {
			return fmt.Errorf("constant: value must be > 0 (got %v)", m.Value)
		}
	case DelayUniform:
		if m.Min < 0 || m.Max <= m.Min {
			return fmt.Errorf("uniform: need 0 <= min < max (got %v, %v)", m.Min, m.Max)
		}
	case DelayWeibull, DelayPareto:
		if m.Shape <= 0 || m.Scale <= 0 || m.Offset < 0 {
			return fmt.Errorf("%s: need shape > 0, scale > 0, offset >= 0 (got %v, %v, %v)", m.Kind, m.Shape, m.Scale, m.Offset)
		}
	case DelayBimodal:
		if !frac(m.P) {
			return fmt.Errorf("bimodal: p must be in [0, 1] (got %v)", m.P)
		}
		if err := sub("a", m.A); err != nil {
			return err
		}
		return sub("b", m.B)
	case DelayPriority:
		if !frac(m.HighFraction) || m.Queue < 0 || m.Period <= 0 {
			return fmt.Errorf("priority: need high_fraction in [0, 1], queue >= 0, period > 0 (got %v, %v, %v)", m.HighFraction, m.Queue, m.Period)
		}
		if err := sub("high", m.High); err != nil {
			return err
		}
		return sub("low", m.Low)
	case DelayECMP:
		if len(m.Paths) == 0 {
			return errors.New("ecmp: at least one path is needed")
		}
		var w float64
		for _, p := range m.Paths {
			if p.Base <= 0 || p.Weight < 0 {
				return fmt.Errorf("ecmp: path base must be > 0 and weight >= 0 (got %v, %v)", p.Base, p.Weight)
			}
			w += p.Weight
		}
		if w <= 0 {
			return errors.New("ecmp: path weights must have a positive sum")
		}
		if m.Jitter != nil {
			return sub("jitter", m.Jitter)
		}
	default:
		return fmt.Errorf("unknown kind %q: use constant, uniform, weibull, pareto, bimodal, priority or ecmp", m.Kind)
	}
	return nil
}

func (l *LossModel) validate() error {
	switch l.Kind {
	case "", LossNone:
	case LossUniform:
		if !frac(l.P) {
			return fmt.Errorf("uniform: p must be in [0, 1] (got %v)", l.P)
		}
	case LossGilbert:
		if !frac(l.PGB) || !frac(l.PBG) || !frac(l.LossGood) || !frac(l.LossBad) {
			return errors.New("gilbert: p_gb, p_bg, loss_good and loss_bad are probabilities in [0, 1]")
		}
	default:
		return fmt.Errorf("unknown kind %q: use none, uniform or gilbert", l.Kind)
	}
	return nil
}
