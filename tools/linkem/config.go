// Package linkem is a userspace link emulator: it relays Ethernet frames
// between two interfaces through AF_PACKET raw sockets and applies, per
// traffic class, a one-way delay distribution and a loss model. Each frame
// is released at (kernel receive timestamp + its drawn delay), so the
// reordering that independent per-packet delays imply happens as on a real
// multi-path link. Release times are kept by a heap served by one
// scheduler thread that sleeps with clock_nanosleep (timer slack 1 ns) and
// busy-waits the last few tens of µs, so the added delay is accurate to
// tens of µs on an idle core (see docs/testbed.md for measured numbers).
//
// It exists because this machine has no netem: the live end-to-end test
// (test/e2e) needs a link with known, controllable delay and loss
// between the two taps of lds.
package linkem

import (
	"errors"
	"fmt"
	"time"

	"github.com/lds-net/lds/internal/match"
)

// Delay is a one-way delay distribution.
//
//	constant: Value
//	uniform:  uniform in [Min, Max]
//	bimodal:  A with probability P, else B; each plus uniform [0, Spread)
//	pareto:   Base + Lomax(Scale, Shape) jitter, cut at Cap (0: 50*Scale);
//	          a heavy tail with mean Base + Scale/(Shape-1) for Shape > 1
type Delay struct {
	Kind   string        `yaml:"kind" json:"kind"`
	Value  time.Duration `yaml:"value" json:"value"`
	Min    time.Duration `yaml:"min" json:"min"`
	Max    time.Duration `yaml:"max" json:"max"`
	P      float64       `yaml:"p" json:"p"`
	A      time.Duration `yaml:"a" json:"a"`
	B      time.Duration `yaml:"b" json:"b"`
	Spread time.Duration `yaml:"spread" json:"spread"`
	Base   time.Duration `yaml:"base" json:"base"`
	Scale  time.Duration `yaml:"scale" json:"scale"`
	Shape  float64       `yaml:"shape" json:"shape"`
	Cap    time.Duration `yaml:"cap" json:"cap"`
}

// Loss is a loss model.
//
//	none:    nothing is lost
//	uniform: each frame is lost with probability P
//	gilbert: Gilbert–Elliott two-state chain: per frame, good→bad with
//	         probability PGB, bad→good with PBG; a frame is lost with
//	         LossGood in the good state, LossBad in the bad one
type Loss struct {
	Kind     string  `yaml:"kind" json:"kind"`
	P        float64 `yaml:"p" json:"p"`
	PGB      float64 `yaml:"p_gb" json:"p_gb"`
	PBG      float64 `yaml:"p_bg" json:"p_bg"`
	LossGood float64 `yaml:"loss_good" json:"loss_good"`
	LossBad  float64 `yaml:"loss_bad" json:"loss_bad"`
}

// Class is one traffic class of a direction: frames whose IP packet
// matches Match (protocol, ports, prefixes; empty = every IP packet) get
// its delay and loss. The first matching class wins.
type Class struct {
	Name  string     `yaml:"name" json:"name"`
	Match match.Rule `yaml:"match" json:"match"`
	Delay Delay      `yaml:"delay" json:"delay"`
	Loss  Loss       `yaml:"loss" json:"loss"`
	// FIFO keeps the class's frames in arrival order (a frame is never
	// released before an earlier one of its class), like a single queue;
	// false lets per-packet delays reorder, like parallel paths.
	FIFO bool `yaml:"fifo" json:"fifo"`
}

// Profile is what one direction does. Frames no class matches (ARP,
// non-IP, or IP outside every rule) pass at once, unharmed.
type Profile struct {
	Classes []Class `yaml:"classes" json:"classes"`
}

// Config of an Emulator.
type Config struct {
	// A and B are the two interfaces; Forward applies A→B, Reverse B→A.
	A       string  `yaml:"a" json:"a"`
	B       string  `yaml:"b" json:"b"`
	Forward Profile `yaml:"forward" json:"forward"`
	Reverse Profile `yaml:"reverse" json:"reverse"`
	// Netns, if set, is a network namespace path (/var/run/netns/NAME)
	// where A and B live; the sockets are opened there, the emulator may
	// run in any namespace. Empty: the caller's namespace.
	Netns string `yaml:"netns" json:"netns"`
	// Seed for the delay and loss draws (reproducible runs).
	Seed uint64 `yaml:"seed" json:"seed"`
	// QueueFrames bounds the frames held for delayed release (both
	// directions); past it frames are dropped and counted as overflow.
	QueueFrames int `yaml:"queue_frames" json:"queue_frames"`
	// FrameBytes is the largest frame relayed (longer ones are counted as
	// truncated and dropped); 0: interface MTU + 18 (Ethernet + one VLAN tag).
	FrameBytes int `yaml:"frame_bytes" json:"frame_bytes"`
	// Spin is how long before a release the scheduler stops sleeping and
	// busy-waits: the wake-up latency of clock_nanosleep under load. 0
	// disables busy-waiting (less CPU, less accuracy).
	Spin time.Duration `yaml:"spin" json:"spin"`
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF of each raw socket, bytes.
	SocketBuffer int `yaml:"socket_buffer" json:"socket_buffer"`
}

// DefaultConfig returns a Config with every default set and no class:
// a plain, instantaneous relay.
func DefaultConfig() Config {
	return Config{QueueFrames: 1 << 16, Spin: 50 * time.Microsecond, SocketBuffer: 8 << 20}
}

// maxDelay bounds every drawn delay: a frame held longer than this is a
// configuration error, not an emulation.
const maxDelay = 10 * time.Second

// Validate checks every key; errors name the key.
func (c *Config) Validate() error {
	var errs []error
	if c.A == "" || c.B == "" {
		errs = append(errs, errors.New("linkem.a / linkem.b: both interface names are required"))
	} else if c.A == c.B {
		errs = append(errs, fmt.Errorf("linkem.a / linkem.b: both are %q; the emulator needs two interfaces", c.A))
	}
	if c.QueueFrames < 1 || c.QueueFrames > 1<<22 {
		errs = append(errs, fmt.Errorf("linkem.queue_frames: %d outside 1..%d", c.QueueFrames, 1<<22))
	}
	if c.FrameBytes != 0 && (c.FrameBytes < 64 || c.FrameBytes > 65535) {
		errs = append(errs, fmt.Errorf("linkem.frame_bytes: %d outside 64..65535 (0 = MTU + 18)", c.FrameBytes))
	}
	if c.Spin < 0 || c.Spin > 5*time.Millisecond {
		errs = append(errs, fmt.Errorf("linkem.spin: %v outside 0..5ms", c.Spin))
	}
	if c.SocketBuffer < 0 {
		errs = append(errs, errors.New("linkem.socket_buffer: must be >= 0"))
	}
	errs = append(errs, c.Forward.validate("linkem.forward"), c.Reverse.validate("linkem.reverse"))
	return errors.Join(errs...)
}

func (p *Profile) validate(key string) error {
	var errs []error
	for i := range p.Classes {
		cl := &p.Classes[i]
		k := fmt.Sprintf("%s.classes[%d]", key, i)
		if _, err := cl.Match.Compile(k + ".match"); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, cl.Delay.validate(k+".delay"), cl.Loss.validate(k+".loss"))
	}
	return errors.Join(errs...)
}

func (d *Delay) validate(key string) error {
	neg := func(name string, v time.Duration) error {
		if v < 0 || v > maxDelay {
			return fmt.Errorf("%s.%s: %v outside 0..%v", key, name, v, maxDelay)
		}
		return nil
	}
	switch d.Kind {
	case "", "constant":
		return neg("value", d.Value)
	case "uniform":
		if err := errors.Join(neg("min", d.Min), neg("max", d.Max)); err != nil {
			return err
		}
		if d.Max < d.Min {
			return fmt.Errorf("%s: max %v below min %v", key, d.Max, d.Min)
		}
	case "bimodal":
		if d.P < 0 || d.P > 1 {
			return fmt.Errorf("%s.p: %v outside [0, 1]", key, d.P)
		}
		return errors.Join(neg("a", d.A), neg("b", d.B), neg("spread", d.Spread), neg("a+spread", d.A+d.Spread), neg("b+spread", d.B+d.Spread))
	case "pareto":
		if d.Shape <= 0 {
			return fmt.Errorf("%s.shape: %v must be > 0 (e.g. 2.5)", key, d.Shape)
		}
		if d.Scale <= 0 {
			return fmt.Errorf("%s.scale: %v must be > 0", key, d.Scale)
		}
		return errors.Join(neg("base", d.Base), neg("cap", d.Cap), neg("base+cap", d.Base+d.cap()))
	default:
		return fmt.Errorf("%s.kind: %q is not one of constant, uniform, bimodal, pareto", key, d.Kind)
	}
	return nil
}

func (d *Delay) cap() time.Duration {
	if d.Cap > 0 {
		return d.Cap
	}
	return 50 * d.Scale
}

// Min is the smallest delay the distribution can draw.
func (d *Delay) minimum() time.Duration {
	switch d.Kind {
	case "uniform":
		return d.Min
	case "bimodal":
		return min(d.A, d.B)
	case "pareto":
		return d.Base
	}
	return d.Value
}

func (l *Loss) validate(key string) error {
	prob := func(name string, v float64) error {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("%s.%s: %v outside [0, 1]", key, name, v)
		}
		return nil
	}
	switch l.Kind {
	case "", "none":
		return nil
	case "uniform":
		return prob("p", l.P)
	case "gilbert":
		if err := errors.Join(prob("p_gb", l.PGB), prob("p_bg", l.PBG), prob("loss_good", l.LossGood), prob("loss_bad", l.LossBad)); err != nil {
			return err
		}
		if l.PBG == 0 && l.PGB > 0 {
			return fmt.Errorf("%s.p_bg: 0 with p_gb > 0 would stay in the bad state forever", key)
		}
		return nil
	}
	return fmt.Errorf("%s.kind: %q is not one of none, uniform, gilbert", key, l.Kind)
}

// Rate is the long-run loss probability of the model (Gilbert–Elliott:
// stationary state probabilities times each state's loss).
func (l *Loss) Rate() float64 {
	switch l.Kind {
	case "uniform":
		return l.P
	case "gilbert":
		if l.PGB+l.PBG == 0 {
			return l.LossGood
		}
		pb := l.PGB / (l.PGB + l.PBG)
		return (1-pb)*l.LossGood + pb*l.LossBad
	}
	return 0
}

// immediate reports whether the class neither delays nor drops: its
// frames are written from the reader at once.
func (c *Class) immediate() bool {
	return (c.Delay.Kind == "" || c.Delay.Kind == "constant") && c.Delay.Value == 0 && c.Loss.Rate() == 0
}
